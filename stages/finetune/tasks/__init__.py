"""Fine-tuning tasks: specs (what a task is) and readers (how its files are read).

    from stages.finetune.tasks import get_task          # light: no numpy, for the config
    from stages.finetune.tasks.tsv import read_split     # reading pulls in numpy
"""

from stages.finetune.tasks.registry import TASKS, get_task, task_names
from stages.finetune.tasks.spec import ConllSpec, SquadSpec, TaskSpec, TsvFile

__all__ = ["TASKS", "ConllSpec", "SquadSpec", "TaskSpec", "TsvFile", "get_task", "task_names"]
