"""The files the pretrain stage reads besides its input stages: a user's DeepSpeed JSON."""

from __future__ import annotations

DEEPSPEED_CONFIG = "pretrain.deepspeed_config"


def input_files(experiment) -> dict[str, str]:
    path = experiment.pretrain.deepspeed_config
    return {DEEPSPEED_CONFIG: path} if path else {}
