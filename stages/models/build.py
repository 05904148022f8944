"""Build a model from its architecture, and save / load pretrained weights. Imports only
torch (and safetensors, which is torch-only serialisation).

    model = build_model(cfg.model.architecture(), vocab_size=8192, max_seq_len=128)
    model = build_model({"family": "t5", ...}, vocab_size=8192, pad_token_id=0, eos_token_id=1)
    model = build_preset("t5-small")       # a freshly initialised T5 of a named shape
    save_pretrained(model, out_dir)        # out_dir/model.safetensors + model_config.json
    model = load_pretrained(out_dir)       # same class, same weights, eval() not implied

An architecture is one mapping: `{"family": <name>, <fields of that family's config>}`,
what the pretrain stage's `pretrain.model.architecture()` returns and model_config.json
holds. Families: "gpt" -> GPT (GPTConfig), "bert" -> BertForPreTraining (BertConfig),
"t5" -> T5 (T5Config); the configs and presets are torch-free (stages/models/config.py).
A variant with a class of its own is looked up by (family, config.variant) in
VARIANT_MODELS: ("t5", "transformer") -> Transformer (the original Transformer, also a
T5Config), ("bert", "electra") -> ElectraForPreTraining (BertConfig). What comes from the
data (vocab_size, max_seq_len, special token ids) is passed separately and applied to the
families whose config has that field (T5 has relative positions: no max_seq_len).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch.nn as nn
from safetensors.torch import save_model

from stages.models.bert.electra import ElectraForPreTraining
from stages.models.bert.model import BertForPreTraining
from stages.models.config import FAMILY_CONFIGS, family_config, preset_config, preset_shape
from stages.models.gpt.model import GPT
from stages.models.t5.model import T5
from stages.models.t5.transformer import Transformer
from stages.models.weights_file import load_weights_into

WEIGHTS_NAME = "model.safetensors"
CONFIG_NAME = "model_config.json"

# family -> (config dataclass, model class): the pretraining model of each family.
MODEL_FAMILIES: dict[str, tuple[type, type[nn.Module]]] = {
    family: (FAMILY_CONFIGS[family], model) for family, model in (("gpt", GPT), ("bert", BertForPreTraining),
                                                                   ("t5", T5))}
# (family, config variant) -> model class, for the variants that are a class of their own
# (the others are options of the family's class, e.g. gpt llama, bert albert).
VARIANT_MODELS: dict[tuple[str, str], type[nn.Module]] = {
    ("t5", "transformer"): Transformer,
    ("bert", "electra"): ElectraForPreTraining,  # discriminator + generator (electra.py)
}


def model_class(family: str, config: Any) -> type[nn.Module]:
    """The class that builds `config`, a config of `family`: its variant's own, or the family's."""
    return VARIANT_MODELS.get((family, getattr(config, "variant", None)), MODEL_FAMILIES[family][1])


def build_model(architecture: Mapping[str, Any], vocab_size: int, max_seq_len: int | None = None,
                **token_ids: int) -> nn.Module:
    """A freshly initialised model of `architecture` ({"family": name (default "gpt"),
    <its config's fields>}).

    token_ids: special token ids from the tokenizer/dataset (pad_token_id, eos_token_id,
    decoder_start_token_id); each is used by the families whose config has it."""
    config = family_config(architecture, vocab_size=vocab_size, max_seq_len=max_seq_len, **token_ids)
    return model_class(architecture.get("family", "gpt"), config)(config)


def build_preset(name: str, **overrides: Any) -> nn.Module:
    """A freshly initialised model of preset `name` (GPT, BertForPreTraining, T5, ...)."""
    family, _ = preset_shape(name)
    config = preset_config(name, **overrides)
    return model_class(family, config)(config)


def padded_vocab_size(vocab_size: int, multiple: int) -> int:
    """`vocab_size` rounded up to a multiple of `multiple` (pretrain.model.pad_vocab_to_multiple_of)."""
    return -(-vocab_size // multiple) * multiple


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
    architecture = json.loads(config_path.read_text())
    config = family_config(architecture, source=str(config_path))
    model = model_class(architecture.get("family", "gpt"), config)(config)
    load_weights_into(model, weights_path, device=device)  # errors name the file
    return model


def _family_of(model: nn.Module) -> str:
    classes = [(family, cls) for family, (_, cls) in MODEL_FAMILIES.items()]
    classes += [(family, cls) for (family, _), cls in VARIANT_MODELS.items()]
    for family, model_cls in classes:
        if type(model) is model_cls:
            return family
    raise TypeError(
        f"save_pretrained saves a backbone ({[c.__name__ for _, c in classes]}), "
        f"got {type(model).__name__}; for a task head, save its backbone and the head's "
        "own state_dict"
    )

