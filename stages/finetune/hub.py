"""Tasks from the Hugging Face Hub (`finetune.source: hub`), in the same form as the official files.

    examples = read_glue_split(get_task("rte"), "dev")       # TaskExamples, as tasks.tsv.read_split
    train, dev = read_squad_splits(get_task("squad"))        # SquadExample lists, as squad.reader
    sentences = read_conll_splits(get_task("conll2003"))     # ConllSentences per split, as conll.reader

`load_dataset` needs the network (or the datasets cache); everything after it is a plain
conversion of a `datasets.Dataset`, in the `*_from_dataset` functions, so the rest of the
stage cannot tell where a task came from. Hub labels are integers with a ClassLabel
feature: they are mapped by name where the names are the official files' labels (MNLI's
hub order, entailment/neutral/contradiction, differs from ours), else by number (SST-2's
"negative"/"positive" are the files' 0/1). GLUE test rows carry label -1: no labels.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from stages.finetune.conll.reader import ConllDataError, ConllSentences, to_iob2
from stages.finetune.squad.reader import Answer, SquadDataError, SquadExample
from stages.finetune.tasks.examples import TaskExamples
from stages.finetune.tasks.spec import ConllSpec, SquadSpec, TaskSpec
from stages.finetune.tasks.tsv import TaskDataError

GLUE_HUB = "nyu-mll/glue"
SQUAD_HUB = {"1.1": "rajpurkar/squad", "2.0": "rajpurkar/squad_v2"}
# The canonical CoNLL-2003 dataset is a loading script, which datasets >= 4 does not run;
# the Hub's own parquet conversion of it has the same columns and ClassLabel tags.
CONLL_HUB, CONLL_HUB_REVISION = "eriktks/conll2003", "refs/convert/parquet"

# Our task name -> (hub config, text columns, {our split: hub split}).
_GLUE_SPLITS = {"train": "train", "dev": "validation", "test": "test"}
GLUE_HUB_LAYOUT: dict[str, tuple[str, tuple[str, ...], dict[str, str]]] = {
    "cola": ("cola", ("sentence",), _GLUE_SPLITS),
    "sst2": ("sst2", ("sentence",), _GLUE_SPLITS),
    "mrpc": ("mrpc", ("sentence1", "sentence2"), _GLUE_SPLITS),
    "stsb": ("stsb", ("sentence1", "sentence2"), _GLUE_SPLITS),
    "qqp": ("qqp", ("question1", "question2"), _GLUE_SPLITS),
    "mnli": ("mnli", ("premise", "hypothesis"),
             {"train": "train", "dev": "validation_matched", "test": "test_matched"}),
    "mnli_mm": ("mnli", ("premise", "hypothesis"),
                {"train": "train", "dev": "validation_mismatched", "test": "test_mismatched"}),
    "qnli": ("qnli", ("question", "sentence"), _GLUE_SPLITS),
    "rte": ("rte", ("sentence1", "sentence2"), _GLUE_SPLITS),
    "wnli": ("wnli", ("sentence1", "sentence2"), _GLUE_SPLITS),
}


def _load(path: str, name: str | None, split: str, revision: str | None = None):
    import datasets

    try:
        return datasets.load_dataset(path, name, split=split, revision=revision)
    except Exception as error:  # offline, renamed dataset, no such split: say what was asked for
        where = f"{path}" + (f" ({name})" if name else "") + (f" at {revision}" if revision else "")
        raise RuntimeError(
            f"finetune.source is 'hub' but {where} split {split!r} could not be loaded from the Hugging "
            f"Face Hub: {type(error).__name__}: {error}. Check the network (or set HF_HUB_OFFLINE=1 with "
            "a filled cache), or use finetune.source: files with the official files under data_dir") from error


def read_glue_split(spec: TaskSpec, split: str) -> TaskExamples:
    config, _, splits = GLUE_HUB_LAYOUT[spec.name]
    return glue_from_dataset(spec, _load(GLUE_HUB, config, splits[split]), where=f"{GLUE_HUB}/{config}")


def glue_from_dataset(spec: TaskSpec, dataset, *, where: str) -> TaskExamples:
    """A nyu-mll/glue split -> TaskExamples with our class ids (or scores); labels None
    when the split has none (the test split's -1)."""
    _, text_columns, _ = GLUE_HUB_LAYOUT[spec.name]
    _check_columns(dataset, [*text_columns, "label", "idx"], where)
    texts = list(zip(*(map(str.strip, dataset[column]) for column in text_columns)))
    ids = [str(i) for i in dataset["idx"]]
    raw = np.asarray(dataset["label"])
    if len(raw) and (raw == -1).all():
        return TaskExamples(texts=texts, labels=None, ids=ids)
    if spec.is_regression:
        return TaskExamples(texts=texts, labels=raw.astype(np.float32), ids=ids)
    to_ours = _class_id_map(spec, dataset.features["label"], where)
    bad = next((i for i, value in enumerate(raw) if int(value) not in to_ours), None)
    if bad is not None:
        raise TaskDataError(f"{where}: row {bad} (idx {ids[bad]}) has label {int(raw[bad])}, not one of task "
                            f"{spec.name!r}'s {sorted(to_ours)}; is this the {spec.name} config?")
    return TaskExamples(texts=texts, labels=np.asarray([to_ours[int(v)] for v in raw], dtype=np.int64), ids=ids)


def _class_id_map(spec: TaskSpec, feature: Any, where: str) -> dict[int, int]:
    """Hub class number -> our class id: by name where the hub's names are ours, else by number."""
    names = list(getattr(feature, "names", None) or [])
    if names and set(names) <= set(spec.labels):
        return {number: spec.labels.index(name) for number, name in enumerate(names)}
    if names and len(names) != spec.num_labels:
        raise TaskDataError(f"{where}: label feature has {len(names)} classes {names}; task {spec.name!r} "
                            f"has {spec.num_labels} ({', '.join(spec.labels)})")
    return {number: spec.labels.index(str(number)) for number in range(spec.num_labels)
            if str(number) in spec.labels}


def read_squad_splits(spec: SquadSpec) -> tuple[list[SquadExample], list[SquadExample]]:
    """(train, dev) of rajpurkar/squad or rajpurkar/squad_v2."""
    path = SQUAD_HUB[spec.version]
    return (squad_from_dataset(_load(path, None, "train"), where=f"{path} train"),
            squad_from_dataset(_load(path, None, "validation"), where=f"{path} validation"))


def squad_from_dataset(dataset, *, where: str) -> list[SquadExample]:
    """Rows {id, title, context, question, answers: {text: [...], answer_start: [...]}} ->
    SquadExamples; no answers = a v2.0 unanswerable question. answer_start is checked
    against the text as for the JSON files."""
    _check_columns(dataset, ["id", "title", "context", "question", "answers"], where)
    examples = []
    for row in dataset:
        answers = []
        for text, start in zip(row["answers"]["text"], row["answers"]["answer_start"]):
            found = row["context"][start:start + len(text)]
            if found != text:
                raise SquadDataError(f"{where}: question id {row['id']}: answer_start={start} points at "
                                     f"{found!r}, not at the answer text {text!r}")
            answers.append(Answer(text=text, start=int(start)))
        examples.append(SquadExample(id=row["id"], title=row["title"], question=row["question"],
                                     context=row["context"], answers=answers, is_impossible=not answers))
    if not examples:
        raise SquadDataError(f"{where}: no questions")
    return examples


def read_conll_splits(spec: ConllSpec) -> dict[str, ConllSentences]:
    hub_splits = {"train": "train", "dev": "validation", "test": "test"}
    return {split: conll_from_dataset(spec, _load(CONLL_HUB, None, hub_split, CONLL_HUB_REVISION),
                                      where=f"{CONLL_HUB} {hub_split}")
            for split, hub_split in hub_splits.items()}


def conll_from_dataset(spec: ConllSpec, dataset, *, where: str) -> ConllSentences:
    """Rows {tokens: [...], ner_tags: [class numbers]} -> IOB2 ConllSentences; `lines`
    holds the 1-based row number (there are no file lines)."""
    _check_columns(dataset, ["tokens", "ner_tags"], where)
    names = dataset.features["ner_tags"].feature.names
    unknown = sorted(set(names) - set(spec.labels))
    if unknown:
        raise ConllDataError(f"{where}: ner_tags classes {unknown} are not among {', '.join(spec.labels)}")
    sentences = ConllSentences([], [], [])
    for number, (tokens, tags) in enumerate(zip(dataset["tokens"], dataset["ner_tags"]), start=1):
        if len(tokens) != len(tags):
            raise ConllDataError(f"{where}: row {number} has {len(tokens)} tokens but {len(tags)} ner_tags")
        if tokens and tokens[0] != "-DOCSTART-":  # document separators are not text (as in read_conll)
            sentences.words.append(list(tokens))
            sentences.tags.append(to_iob2([names[t] for t in tags]))
            sentences.lines.append(number)
    return sentences


def _check_columns(dataset, needed: list[str], where: str) -> None:
    missing = [column for column in needed if column not in dataset.column_names]
    if missing:
        raise TaskDataError(f"{where}: columns {dataset.column_names} lack {missing}; the finetune stage "
                            "reads the layout of the Hub datasets named in stages/finetune/hub.py")
