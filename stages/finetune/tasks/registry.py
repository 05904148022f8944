"""Task name -> spec, for every task family the finetune stage knows.

Light on purpose (no torch, no sklearn): the config validator calls `get_task` when an
experiment file is loaded. SQuAD and CoNLL will add their own spec kinds here.
"""

from __future__ import annotations

import difflib

from stages.finetune.tasks.glue import GLUE_TASKS
from stages.finetune.tasks.spec import TaskSpec

TASKS: dict[str, TaskSpec] = {**GLUE_TASKS}


def task_names() -> list[str]:
    return sorted(TASKS)


def get_task(name: str) -> TaskSpec:
    if name in TASKS:
        return TASKS[name]
    close = difflib.get_close_matches(name.lower(), TASKS, n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    raise ValueError(f"unknown task {name!r}; {hint}valid tasks: {', '.join(task_names())}")
