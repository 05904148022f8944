"""Task name -> spec, for every task family the finetune stage knows.

Light on purpose (no torch, no sklearn): the config validator calls `get_task` when an
experiment file is loaded. GLUE tasks are `TaskSpec`s, SQuAD `SquadSpec`s, CoNLL `ConllSpec`s.
"""

from __future__ import annotations

import difflib

from stages.finetune.tasks.glue import GLUE_TASKS
from stages.finetune.conll.reader import CONLL_LABELS
from stages.finetune.tasks.spec import ConllSpec, SquadSpec, TaskSpec

OTHER_TASKS = {
    spec.name: spec
    for spec in [
        SquadSpec(name="squad", version="1.1", train_file="train-v1.1.json", dev_file="dev-v1.1.json",
                  description="extractive question answering, every question has an answer"),
        SquadSpec(name="squad_v2", version="2.0", train_file="train-v2.0.json", dev_file="dev-v2.0.json",
                  description="extractive question answering with unanswerable questions"),
        ConllSpec(name="conll2003", directory="conll2003",
                  files={"train": "train.txt", "dev": "valid.txt", "test": "test.txt"},
                  labels=CONLL_LABELS, description="named entities PER, ORG, LOC, MISC (IOB2)"),
    ]
}
TASKS: dict[str, TaskSpec | SquadSpec | ConllSpec] = {**GLUE_TASKS, **OTHER_TASKS}


def task_names() -> list[str]:
    return sorted(TASKS)


def get_task(name: str) -> TaskSpec | SquadSpec | ConllSpec:
    if name in TASKS:
        return TASKS[name]
    close = difflib.get_close_matches(name.lower(), TASKS, n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    raise ValueError(f"unknown task {name!r}; {hint}valid tasks: {', '.join(task_names())}")
