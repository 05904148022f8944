"""The files the pretrain stage reads besides its input stages: a user's DeepSpeed JSON,
the spec and data files of pretrain.eval_tasks (their scores are logged outputs), and
every file of the pretrain.init_from folder (as finetune.init_from's)."""

from __future__ import annotations

from storage.file_tree import local_tree

DEEPSPEED_CONFIG = "pretrain.deepspeed_config"
EVAL_TASKS = "pretrain.eval_tasks"
INIT_FROM = "pretrain.init_from"


def input_files(experiment) -> dict[str, str]:
    path = experiment.pretrain.deepspeed_config
    files = {DEEPSPEED_CONFIG: path} if path else {}
    if experiment.pretrain.eval_tasks:
        files.update(_eval_task_files(experiment))
    if experiment.pretrain.init_from:
        files.update(local_tree(experiment.pretrain.init_from, INIT_FROM))
    return files


def _eval_task_files(experiment) -> dict[str, str]:
    from stages.evaluate.inputs import task_files

    return task_files(experiment.pretrain.eval_tasks, experiment.resolved_data_dir, prefix=EVAL_TASKS)
