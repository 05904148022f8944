"""The files the pretrain stage reads besides its input stages: a user's DeepSpeed JSON,
and the spec and data files of pretrain.eval_tasks (their scores are logged outputs)."""

from __future__ import annotations

DEEPSPEED_CONFIG = "pretrain.deepspeed_config"
EVAL_TASKS = "pretrain.eval_tasks"


def input_files(experiment) -> dict[str, str]:
    path = experiment.pretrain.deepspeed_config
    files = {DEEPSPEED_CONFIG: path} if path else {}
    if experiment.pretrain.eval_tasks:
        files.update(_eval_task_files(experiment))
    return files


def _eval_task_files(experiment) -> dict[str, str]:
    from stages.evaluate.inputs import task_files

    return task_files(experiment.pretrain.eval_tasks, experiment.resolved_data_dir, prefix=EVAL_TASKS)
