"""A user's raw DeepSpeed JSON, deep-merged over the config we generate (theirs wins).

    theirs = read_deepspeed_json("ds_overrides.json", config_key="pretrain.deepspeed_config")
    merged, overrides = merge_deepspeed_config(ours, theirs)
    for override in overrides:   # every key where the user replaced a value of ours
        print(override)          # "zero_optimization.stage: ours 2, theirs 3"

The escape hatch for DeepSpeed settings we do not model (bucket sizes, NVMe offload,
communication dtypes, ...). Nested objects merge key by key; anything else (numbers,
strings, lists, or an object replacing a plain value) is replaced whole, and each such
replacement of one of our values is an Override, so a run's record shows exactly which
of our settings a user file changed. Keys only the user sets are added silently.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Sections the trainer builds itself as objects, not from the config: a user file that
# names them would be ignored or fight the client optimizer, so it is refused instead.
# The batch keys are refused too: the training loop counts micro batches per optimizer
# step from our config, so DeepSpeed must agree with it.
OWNED_BY_THE_TRAINER = {
    "optimizer": "the trainer passes its own AdamW (pretrain.lr, weight_decay, adam_betas)",
    "scheduler": "the trainer passes its own schedule (pretrain.lr_decay, warmup_steps)",
    "train_batch_size": "set pretrain.micro_batch_size and gradient_accumulation_steps instead",
    "train_micro_batch_size_per_gpu": "set pretrain.micro_batch_size instead",
    "gradient_accumulation_steps": "set pretrain.gradient_accumulation_steps instead",
}


@dataclass(frozen=True)
class Override:
    key: str  # dotted path, e.g. "zero_optimization.stage"
    ours: Any
    theirs: Any

    def __str__(self) -> str:
        return f"{self.key}: ours {json.dumps(self.ours)}, theirs {json.dumps(self.theirs)}"


def read_deepspeed_json(path: str | Path, config_key: str) -> dict[str, Any]:
    """The JSON object in `path`; errors name the file, the line and `config_key`."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(
            f"{config_key}: {path} does not exist (a relative path is taken from the directory "
            f"the pipeline runs in, {Path.cwd()}); fix the path or unset {config_key}")
    text = path.read_text()
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(
            f"{path}:{error.lineno}:{error.colno}: not valid JSON ({error.msg}); this file is "
            f"{config_key}, a DeepSpeed config merged over ours: fix it or unset the key"
        ) from None
    if not isinstance(value, dict):
        raise ValueError(f"{path}: {config_key} must hold a JSON object ({{...}}), got a "
                         f"{type(value).__name__}")
    for section, reason in OWNED_BY_THE_TRAINER.items():
        if section in value:
            line = next((n for n, text_line in enumerate(text.splitlines(), 1)
                         if f'"{section}"' in text_line), 1)
            raise ValueError(f"{path}:{line}: remove {section!r} from {config_key}: {reason}")
    return value


def merge_deepspeed_config(ours: dict[str, Any], theirs: dict[str, Any]
                           ) -> tuple[dict[str, Any], list[Override]]:
    """`ours` with `theirs` merged over it (neither is modified), and the overrides."""
    merged = copy.deepcopy(ours)
    overrides: list[Override] = []
    _merge_into(merged, theirs, prefix="", overrides=overrides)
    return merged, overrides


def _merge_into(target: dict[str, Any], source: dict[str, Any], prefix: str,
                overrides: list[Override]) -> None:
    for key, theirs in source.items():
        dotted = f"{prefix}{key}"
        if key not in target:
            target[key] = copy.deepcopy(theirs)
        elif isinstance(target[key], dict) and isinstance(theirs, dict):
            _merge_into(target[key], theirs, f"{dotted}.", overrides)
        else:
            if target[key] != theirs:
                overrides.append(Override(dotted, target[key], theirs))
            target[key] = copy.deepcopy(theirs)
