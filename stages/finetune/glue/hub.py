"""GLUE from the Hugging Face Hub (`finetune.source: hub`), as `glue.reader.read_split` reads the files.

    examples = read_glue_split(get_task("rte"), "dev")       # TaskExamples

Hub labels are integers with a ClassLabel feature: they are mapped by name where the
names are the official files' labels (MNLI's hub order, entailment/neutral/contradiction,
differs from ours), else by number (SST-2's "negative"/"positive" are the files' 0/1).
GLUE test rows carry label -1: no labels.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from stages.finetune.glue.examples import TaskExamples
from stages.finetune.glue.reader import TaskDataError
from stages.finetune.glue.spec import TaskSpec
from stages.finetune.hub import check_columns, load_split

GLUE_HUB = "nyu-mll/glue"

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


def read_glue_split(spec: TaskSpec, split: str) -> TaskExamples:
    config, _, splits = GLUE_HUB_LAYOUT[spec.name]
    return glue_from_dataset(spec, load_split(GLUE_HUB, config, splits[split]), where=f"{GLUE_HUB}/{config}")


def glue_from_dataset(spec: TaskSpec, dataset, *, where: str) -> TaskExamples:
    """A nyu-mll/glue split -> TaskExamples with our class ids (or scores); labels None
    when the split has none (the test split's -1)."""
    _, text_columns, _ = GLUE_HUB_LAYOUT[spec.name]
    check_columns(dataset, [*text_columns, "label", "idx"], where, TaskDataError)
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
