"""The family configs by name, and the presets beside them: torch-free, so the pretrain
config validates `pretrain.model` and expands `pretrain.model.preset` without torch
(`pretrain plan` and `status` stay light). Each family's config and presets live in its
package (gpt/config.py, bert/config.py, t5/config.py); models are built from them in
build.py.

    config = family_config({"family": "t5", "num_layers": 2}, vocab_size=512)   # a T5Config
    config = preset_config("bert-base", dropout=0.0)                            # a BertConfig
    family, fields = preset_shape("gpt2-small")    # what `pretrain.model.preset` reads
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from stages.models.bert import config as bert
from stages.models.gpt import config as gpt
from stages.models.t5 import config as t5

FAMILY_CONFIGS: dict[str, type] = {"gpt": gpt.GPTConfig, "bert": bert.BertConfig, "t5": t5.T5Config}
# name -> (family, config fields)
PRESETS: dict[str, tuple[str, dict[str, Any]]] = {
    name: (family, fields) for family, module in (("gpt", gpt), ("bert", bert), ("t5", t5))
    for name, fields in module.PRESETS.items()}
# Preset fields the pretrain stage takes from the dataset instead (index.json): a preset's
# values there only record the paper's vocabulary and context.
FIELDS_FROM_DATA = ("vocab_size", "max_seq_len")


def family_config(architecture: Mapping[str, Any], source: str = "model config", **from_data: Any) -> Any:
    """The config dataclass of `architecture`: {"family": name (default "gpt"), <its
    config's fields>}. `from_data` (vocab_size, max_seq_len, special token ids) is applied
    where the family's config has that field and the value is not None."""
    fields = dict(architecture)
    family = fields.pop("family", "gpt")
    if family not in FAMILY_CONFIGS:
        raise ValueError(f"{source}: unknown model family {family!r}; known: {sorted(FAMILY_CONFIGS)}")
    config_cls = FAMILY_CONFIGS[family]
    known = {f.name for f in dataclasses.fields(config_cls)}
    unknown = sorted(set(fields) - known)
    if unknown:
        raise ValueError(f"{source}: keys {unknown} are not fields of {config_cls.__name__} "
                         f"(family {family!r}); valid keys: {sorted(known)}")
    fields.update({name: value for name, value in from_data.items() if name in known and value is not None})
    return config_cls(**fields)


def preset_config(name: str, **overrides: Any) -> Any:
    """The config dataclass of preset `name`, with fields overridden (e.g. dropout=0.0)."""
    family, fields = preset_shape(name)
    return family_config({"family": family, **fields, **overrides}, source=f"preset {name!r}")


def preset_shape(name: str) -> tuple[str, dict[str, Any]]:
    """(family, config fields) of preset `name`; ValueError naming the closest preset."""
    if name not in PRESETS:
        import difflib

        close = difflib.get_close_matches(name, PRESETS, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise ValueError(f"unknown model preset {name!r}{hint} known: {sorted(PRESETS)}")
    family, fields = PRESETS[name]
    return family, dict(fields)
