"""Task name -> spec, for every task family the finetune stage knows.

Light on purpose (no torch, no sklearn): the config validator calls `get_task` when an
experiment file is loaded. GLUE tasks are `TaskSpec`s, SQuAD `SquadSpec`s, CoNLL `ConllSpec`s,
translation and summarization `Seq2SeqSpec`s: built in, or a user's spec file that
`finetune.task_specs` names (`register_task_spec`, called by the config validator, so
that every process that loads the experiment knows the task by its name).
"""

from __future__ import annotations

import difflib

from stages.finetune.tasks.glue import GLUE_TASKS
from stages.finetune.conll.reader import CONLL_LABELS
from stages.finetune.tasks.seq2seq_spec import BUILTIN_SEQ2SEQ, Seq2SeqSpec, load_seq2seq_spec
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
TASKS: dict[str, TaskSpec | SquadSpec | ConllSpec | Seq2SeqSpec] = {**GLUE_TASKS, **OTHER_TASKS, **BUILTIN_SEQ2SEQ}
# Tasks from users' spec files (finetune.task_specs), by name; filled by register_task_spec.
USER_TASKS: dict[str, Seq2SeqSpec] = {}


def register_task_spec(path: str) -> Seq2SeqSpec:
    """Load a user's sequence-to-sequence spec file and make its task known by name."""
    spec = load_seq2seq_spec(path)
    if spec.name in TASKS:
        raise ValueError(f"{path}: name {spec.name!r} is a built-in task's; give the spec another name")
    USER_TASKS[spec.name] = spec  # the latest loaded experiment's spec of that name
    return spec


def task_names() -> list[str]:
    return sorted(TASKS)


def get_task(name: str) -> TaskSpec | SquadSpec | ConllSpec | Seq2SeqSpec:
    if name in TASKS:
        return TASKS[name]
    if name in USER_TASKS:
        return USER_TASKS[name]
    if name.endswith((".yaml", ".yml")):
        raise ValueError(f"{name!r} is a spec file: name it in finetune.task_specs and list its task's name: "
                         "in finetune.tasks")
    close = difflib.get_close_matches(name.lower(), [*TASKS, *USER_TASKS], n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    raise ValueError(f"unknown task {name!r}; {hint}valid tasks: {', '.join(task_names())}")
