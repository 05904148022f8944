"""Task name -> spec, for every task family the finetune stage knows.

Light on purpose (no torch, no sklearn): the config validator calls `get_task` when an
experiment file is loaded. GLUE tasks are `TaskSpec`s, SQuAD `SquadSpec`s, CoNLL `ConllSpec`s,
translation and summarization `Seq2SeqSpec`s: built in, or a user's spec file that
`finetune.task_specs` names (`register_task_spec`, called by the config validator, so
that every process that loads the experiment knows the task by its name).
"""

from __future__ import annotations

import difflib

from stages.finetune.conll.spec import CONLL_TASKS, ConllSpec
from stages.finetune.glue.spec import TaskSpec
from stages.finetune.glue.tasks import GLUE_TASKS
from stages.finetune.seq2seq.spec import BUILTIN_SEQ2SEQ, Seq2SeqSpec, load_seq2seq_spec
from stages.finetune.squad.spec import SQUAD_TASKS, SquadSpec

TASKS: dict[str, TaskSpec | SquadSpec | ConllSpec | Seq2SeqSpec] = {
    **GLUE_TASKS, **SQUAD_TASKS, **CONLL_TASKS, **BUILTIN_SEQ2SEQ,
}
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
