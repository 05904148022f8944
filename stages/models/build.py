"""Build a model from config, and save / load pretrained weights. Imports only torch
(and safetensors, which is torch-only serialisation).

    model = build_model(cfg.model, vocab_size=8192, max_seq_len=128)
    save_pretrained(model, out_dir)        # out_dir/model.safetensors + model_config.json
    model = load_pretrained(out_dir)       # same class, same weights, eval() not implied

`model_cfg` is the pretrain stage's `model` section (a pydantic model), a dict or a
dataclass, with `family` plus the architecture fields of that family's config
(for "gpt": num_layers, hidden_size, num_heads, dropout, layer_norm_eps). vocab_size and
max_seq_len come from the data (tokenizer and dataset), not from the model section.

model_config.json is `{"family": "gpt", <GPTConfig fields>}`.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch.nn as nn
from safetensors.torch import load_model, save_model

from stages.models.gpt import GPT, GPTConfig

WEIGHTS_NAME = "model.safetensors"
CONFIG_NAME = "model_config.json"

# family -> (config dataclass, model class). New families (BERT, T5) register here.
MODEL_FAMILIES: dict[str, tuple[type, type[nn.Module]]] = {
    "gpt": (GPTConfig, GPT),
}


def build_model(model_cfg: Any, vocab_size: int, max_seq_len: int) -> nn.Module:
    """A freshly initialised model of `model_cfg["family"]` (default "gpt")."""
    fields = _as_dict(model_cfg)
    family = fields.pop("family", "gpt")
    config = _family_config(family, {**fields, "vocab_size": vocab_size, "max_seq_len": max_seq_len})
    return MODEL_FAMILIES[family][1](config)


def save_pretrained(model: nn.Module, directory: str | Path) -> Path:
    """Write `model.safetensors` and `model_config.json` into `directory` (created)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    family = _family_of(model)
    # save_model (not save_file) because the LM head shares the embedding's storage;
    # it stores the tensor once and load_model re-ties it.
    save_model(model, str(directory / WEIGHTS_NAME))
    config = {"family": family, **dataclasses.asdict(model.config)}
    (directory / CONFIG_NAME).write_text(json.dumps(config, indent=2) + "\n")
    return directory


def load_pretrained(directory: str | Path, device: str = "cpu") -> nn.Module:
    """The model saved by `save_pretrained` in `directory`."""
    directory = Path(directory)
    config_path, weights_path = directory / CONFIG_NAME, directory / WEIGHTS_NAME
    for path in (config_path, weights_path):
        if not path.is_file():
            raise FileNotFoundError(
                f"{path} not found: load_pretrained expects a directory written by "
                "save_pretrained (the pretrain stage's output_dir/model)"
            )
    fields = json.loads(config_path.read_text())
    family = fields.pop("family", "gpt")
    config = _family_config(family, fields, source=str(config_path))
    model = MODEL_FAMILIES[family][1](config)
    load_model(model, str(weights_path), strict=True, device=device)
    return model


def _family_config(family: str, fields: dict[str, Any], source: str = "model config") -> Any:
    if family not in MODEL_FAMILIES:
        raise ValueError(
            f"{source}: unknown model family {family!r}; known: {sorted(MODEL_FAMILIES)}"
        )
    config_cls = MODEL_FAMILIES[family][0]
    known = {f.name for f in dataclasses.fields(config_cls)}
    unknown = sorted(set(fields) - known)
    if unknown:
        raise ValueError(
            f"{source}: keys {unknown} are not fields of {config_cls.__name__} "
            f"(family {family!r}); valid keys: {sorted(known)}"
        )
    return config_cls(**fields)


def _family_of(model: nn.Module) -> str:
    for family, (_, model_cls) in MODEL_FAMILIES.items():
        if type(model) is model_cls:
            return family
    raise TypeError(
        f"save_pretrained saves a backbone ({[c.__name__ for _, c in MODEL_FAMILIES.values()]}), "
        f"got {type(model).__name__}; for a task head, save its backbone and the head's "
        "own state_dict"
    )


def _as_dict(model_cfg: Any) -> dict[str, Any]:
    if hasattr(model_cfg, "model_dump"):  # pydantic section
        return dict(model_cfg.model_dump())
    if dataclasses.is_dataclass(model_cfg) and not isinstance(model_cfg, type):
        return dataclasses.asdict(model_cfg)
    if isinstance(model_cfg, Mapping):
        return dict(model_cfg)
    raise TypeError(f"model config must be a dict, dataclass or pydantic model, got {type(model_cfg)}")
