"""finetune.source: hub. Tests cannot reach the Hub, so the conversions are tested on
`datasets.Dataset`s built with the Hub datasets' own columns and features (GLUE and CoNLL
labels as ClassLabel integers), several of them filled from the official files, which
must come out exactly as the file readers read them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


import numpy as np
import pytest
from datasets import ClassLabel, Dataset, Features, Sequence, Value
from pydantic import ValidationError

from stages.finetune.config import FinetuneConfig
from stages.finetune.conll.hub import conll_from_dataset
from stages.finetune.conll.reader import ConllDataError, read_conll
from stages.finetune.glue.hub import glue_from_dataset
from stages.finetune.glue.reader import TaskDataError, read_split
from stages.finetune.squad.hub import squad_from_dataset
from stages.finetune.squad.reader import SquadDataError, read_squad
from stages.finetune.tasks import get_task

# The label names of nyu-mll/glue and eriktks/conll2003, in the Hub's class order.
HUB_LABELS = {"sst2": ["negative", "positive"], "rte": ["entailment", "not_entailment"],
              "mnli": ["entailment", "neutral", "contradiction"], "wnli": ["not_entailment", "entailment"]}
HUB_NER = ["O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC", "B-MISC", "I-MISC"]


def glue_dataset(columns: dict[str, list], text_columns: tuple[str, ...], label: Value | ClassLabel) -> Dataset:
    features = Features({**{c: Value("string") for c in text_columns}, "label": label, "idx": Value("int32")})
    return Dataset.from_dict(columns, features=features)


def test_glue_rte_from_the_hub_equals_the_official_dev_file(data_dir):
    spec = get_task("rte")
    official = read_split(spec, data_dir, "dev")
    hub_names = HUB_LABELS["rte"]
    dataset = glue_dataset({"sentence1": [t[0] for t in official.texts], "sentence2": [t[1] for t in official.texts],
                            "label": [hub_names.index(spec.labels[i]) for i in official.labels],
                            "idx": [int(i) for i in official.ids]},
                           ("sentence1", "sentence2"), ClassLabel(names=hub_names))
    converted = glue_from_dataset(spec, dataset, where="nyu-mll/glue/rte")
    assert converted.texts == official.texts and converted.ids == official.ids
    assert converted.labels.dtype == np.int64 and np.array_equal(converted.labels, official.labels)


@pytest.mark.parametrize("task, hub_labels, ours", [
    ("sst2", [0, 1, 1], ["0", "1", "1"]),  # by number: negative/positive are the files' 0/1
    ("mnli", [0, 1, 2], ["entailment", "neutral", "contradiction"]),  # by name: another class order
    ("wnli", [0, 1, 0], ["0", "1", "0"]),  # WNLI's files: 1 = entailment, the Hub's class 1
])
def test_glue_hub_class_numbers_become_our_label_strings(task, hub_labels, ours):
    spec = get_task(task)
    texts = ("premise", "hypothesis") if task == "mnli" else ("sentence",) if task == "sst2" else ("sentence1", "sentence2")
    columns = {c: [f"{c} {i} " for i in range(3)] for c in texts}
    dataset = glue_dataset({**columns, "label": hub_labels, "idx": [5, 6, 7]}, texts,
                           ClassLabel(names=HUB_LABELS[task]))
    converted = glue_from_dataset(spec, dataset, where=task)
    assert [spec.labels[i] for i in converted.labels] == ours
    assert converted.ids == ["5", "6", "7"] and converted.texts[0] == tuple(f"{c} 0" for c in texts)


def test_glue_hub_test_split_has_no_labels_and_stsb_scores_stay_scores():
    test = glue_dataset({"sentence": ["a", "b"], "label": [-1, -1], "idx": [0, 1]}, ("sentence",),
                        ClassLabel(names=HUB_LABELS["sst2"]))
    assert glue_from_dataset(get_task("sst2"), test, where="sst2 test").labels is None
    stsb = glue_dataset({"sentence1": ["a"], "sentence2": ["b"], "label": [3.8], "idx": [0]},
                        ("sentence1", "sentence2"), Value("float32"))
    labels = glue_from_dataset(get_task("stsb"), stsb, where="stsb").labels
    assert labels.dtype == np.float32 and labels.tolist() == pytest.approx([3.8])


def test_glue_hub_errors_name_the_dataset_and_row():
    wrong = glue_dataset({"text": ["a"], "label": [0], "idx": [0]}, ("text",), ClassLabel(names=HUB_LABELS["sst2"]))
    with pytest.raises(TaskDataError, match=r"sst2: columns \['text', 'label', 'idx'\] lack \['sentence'\]"):
        glue_from_dataset(get_task("sst2"), wrong, where="sst2")
    three = glue_dataset({"sentence1": ["a"], "sentence2": ["b"], "label": [2], "idx": [9]},
                         ("sentence1", "sentence2"), ClassLabel(names=["a", "b", "c"]))
    with pytest.raises(TaskDataError, match="label feature has 3 classes"):
        glue_from_dataset(get_task("rte"), three, where="rte")


SQUAD_FEATURES = Features({"id": Value("string"), "title": Value("string"), "context": Value("string"),
                           "question": Value("string"),
                           "answers": Sequence({"text": Value("string"), "answer_start": Value("int32")})})


def test_squad_from_the_hub_equals_the_official_json(data_dir):
    official = read_squad(data_dir / "squad" / "dev-v1.1.json")[:300]
    dataset = Dataset.from_dict({
        "id": [e.id for e in official], "title": [e.title for e in official],
        "context": [e.context for e in official], "question": [e.question for e in official],
        "answers": [{"text": [a.text for a in e.answers], "answer_start": [a.start for a in e.answers]}
                    for e in official]}, features=SQUAD_FEATURES)
    assert squad_from_dataset(dataset, where="rajpurkar/squad validation") == official


def test_squad_v2_unanswerable_and_a_wrong_answer_start():
    row = {"id": ["q1", "q2"], "title": ["T", "T"], "context": ["Paris is big.", "Paris is big."],
           "question": ["Where?", "Who?"],
           "answers": [{"text": ["Paris"], "answer_start": [0]}, {"text": [], "answer_start": []}]}
    first, second = squad_from_dataset(Dataset.from_dict(row, features=SQUAD_FEATURES), where="v2")
    assert first.answers[0].text == "Paris" and not first.is_impossible
    assert second.answers == [] and second.is_impossible
    row["answers"][0] = {"text": ["Paris"], "answer_start": [3]}
    with pytest.raises(SquadDataError, match="v2: question id q1: answer_start=3 points at 'is is'"):
        squad_from_dataset(Dataset.from_dict(row, features=SQUAD_FEATURES), where="v2")


CONLL_FEATURES = Features({"id": Value("string"), "tokens": Sequence(Value("string")),
                           "pos_tags": Sequence(Value("int32")), "chunk_tags": Sequence(Value("int32")),
                           "ner_tags": Sequence(ClassLabel(names=HUB_NER))})


def test_conll_from_the_hub_equals_the_official_file(data_dir):
    official = read_conll(data_dir / "conll2003" / "valid.txt")
    rows = {"id": [str(i) for i in range(len(official))], "tokens": official.words,
            "pos_tags": [[0] * len(w) for w in official.words], "chunk_tags": [[0] * len(w) for w in official.words],
            "ner_tags": [[HUB_NER.index(t) for t in tags] for tags in official.tags]}
    converted = conll_from_dataset(get_task("conll2003"), Dataset.from_dict(rows, features=CONLL_FEATURES),
                                   where="eriktks/conll2003 validation")
    assert converted.words == official.words and converted.tags == official.tags
    assert converted.lines == list(range(1, len(official) + 1))  # row numbers: no file lines


def test_conll_hub_tags_in_iob1_become_iob2_and_bad_rows_are_named():
    rows = {"id": ["0"], "tokens": [["EU", "rejects", "German", "call"]], "pos_tags": [[0] * 4],
            "chunk_tags": [[0] * 4], "ner_tags": [[4, 0, 8, 0]]}  # I-ORG O I-MISC O (IOB1)
    converted = conll_from_dataset(get_task("conll2003"), Dataset.from_dict(rows, features=CONLL_FEATURES), where="x")
    assert converted.tags == [["B-ORG", "O", "B-MISC", "O"]]
    rows["ner_tags"] = [[4, 0]]
    with pytest.raises(ConllDataError, match="x: row 1 has 4 tokens but 2 ner_tags"):
        conll_from_dataset(get_task("conll2003"), Dataset.from_dict(rows, features=CONLL_FEATURES), where="x")
    other = Features({**CONLL_FEATURES, "ner_tags": Sequence(ClassLabel(names=["O", "B-GPE"]))})
    rows["ner_tags"] = [[0, 1, 0, 0]]
    with pytest.raises(ConllDataError, match=r"ner_tags classes \['B-GPE'\] are not among"):
        conll_from_dataset(get_task("conll2003"), Dataset.from_dict(rows, features=other), where="x")


def test_source_defaults_to_files_and_rejects_other_values():
    assert FinetuneConfig().source == "files" and FinetuneConfig(source="hub").source == "hub"
    with pytest.raises(ValidationError, match="'files' or 'hub'"):
        FinetuneConfig(source="s3")


def test_the_real_hub_loader_says_what_failed_when_offline(tmp_path):
    # The real `load_dataset` call, in a fresh interpreter that the Hub libraries start
    # offline in (they read HF_HUB_OFFLINE at import) with an empty cache.
    code = ("from stages.finetune.glue.hub import read_glue_split\nfrom stages.finetune.tasks import get_task\n"
            "read_glue_split(get_task('rte'), 'dev')\n")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf"),
           "HF_DATASETS_CACHE": str(tmp_path / "hf" / "datasets")}
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120,
                            cwd=Path(__file__).resolve().parents[2])
    assert result.returncode != 0
    assert ("RuntimeError: finetune.source is 'hub' but nyu-mll/glue (rte) split 'validation' could not be "
            "loaded from the Hugging Face Hub") in result.stderr
