"""Models of the named shapes (the table, torch-free: stages/preset_shapes.py): the
published GPT-2, BERT, ALBERT and T5 sizes, plus tiny debug models for tests and CPU smoke
runs. Parameter counts are asserted in tests/unit/test_model_presets.py.

    config = preset_config("bert-base")           # a BertConfig
    model = build_preset("t5-small")              # a freshly initialised T5
    family, fields = preset_shape("gpt2-small")   # what `pretrain.model.preset` reads
    with torch.device("meta"):                    # shapes only, no memory
        n = build_preset("bert-large").num_parameters()

Family model classes: "gpt" -> GPT, "bert" -> BertForPreTraining (ALBERT: variant albert;
ELECTRA: variant electra, ElectraForPreTraining), "t5" -> T5
(variant transformer: Transformer, the original one; build.VARIANT_MODELS).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch.nn as nn

from stages.models.bert.model import BertConfig, BertForPreTraining
from stages.models.build import model_class
from stages.models.gpt.model import GPT, GPTConfig
from stages.models.t5.model import T5, T5Config
from stages.preset_shapes import FIELDS_FROM_DATA, PRESETS, lookup_preset, preset_shape

__all__ = ["FAMILY_MODELS", "FIELDS_FROM_DATA", "PRESETS", "build_preset", "preset_config", "preset_shape"]

FAMILY_MODELS: dict[str, tuple[type, type[nn.Module]]] = {
    "gpt": (GPTConfig, GPT),
    "bert": (BertConfig, BertForPreTraining),
    "t5": (T5Config, T5),
}

# The table itself (torch-free, for the config): stages/preset_shapes.py.


def preset_config(name: str, **overrides: Any) -> Any:
    """The config dataclass of preset `name`, with fields overridden (e.g. dropout=0.0)."""
    family, fields = lookup_preset(name)
    config_cls = FAMILY_MODELS[family][0]
    known = {f.name for f in dataclasses.fields(config_cls)}
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise ValueError(f"preset {name!r}: {unknown} are not fields of {config_cls.__name__}; valid: {sorted(known)}")
    return config_cls(**{**fields, **overrides})


def build_preset(name: str, **overrides: Any) -> nn.Module:
    """A freshly initialised model of preset `name` (GPT, BertForPreTraining or T5)."""
    family, _ = lookup_preset(name)
    config = preset_config(name, **overrides)
    return model_class(family, config)(config)
