"""Continued pretraining: where `pretrain.init_from` points, and whether it fits the data.

    source = resolve_init_source("ckpt/minilm", cfg.model, index, dataset_dir / "index.json")
        # a ModelSource (stages/training/model_source.py) whose `architecture` holds the
        # family config's fields, taken from the checkpoint

The driver calls this before Ray starts, so a wrong folder, another family, a shape that
disagrees with pretrain.model or a vocabulary that disagrees with the dataset fails
with both sides named. The workers build the model from `architecture` and copy the
weights in (stages/pretrain/init_weights.py) before the DeepSpeed engine exists; a
checkpoint of the run itself, restored after that, still wins.

Folders: a Hugging Face one (config.json + model.safetensors or pytorch_model.bin;
GPT2LMHeadModel / GPT2Model, LlamaForCausalLM / LlamaModel, BertForPreTraining / BertForMaskedLM / BertModel,
AlbertForPreTraining / AlbertForMaskedLM / AlbertModel, ElectraForPreTraining / ElectraModel (the
discriminator; the generator starts fresh), T5ForConditionalGeneration), or one
of ours (the pretrain stage's model/ or a snapshot: model_config.json + model.safetensors). Imports no torch at module load.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from stages.pretrain.inputs import INIT_FROM
from stages.training.model_source import ModelSource

HF_WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
HF_FAMILIES = {"gpt2": "gpt", "llama": "gpt", "bert": "bert", "albert": "bert", "electra": "bert",
               "t5": "t5"}
# our config field -> the name a Hugging Face config.json gives it (same name if absent)
HF_KEY_NAMES = {
    "gpt": {"num_layers": "n_layer", "hidden_size": "n_embd", "num_heads": "n_head", "max_seq_len": "n_positions",
            "layer_norm_eps": "layer_norm_epsilon", "intermediate_size": "n_inner"},
    "bert": {"num_layers": "num_hidden_layers", "num_heads": "num_attention_heads",
             "max_seq_len": "max_position_embeddings"},
    "albert": {"num_layers": "num_hidden_layers", "num_heads": "num_attention_heads",
               "max_seq_len": "max_position_embeddings"},
    "electra": {"num_layers": "num_hidden_layers", "num_heads": "num_attention_heads",
                "max_seq_len": "max_position_embeddings"},
    "llama": {"num_layers": "num_hidden_layers", "num_heads": "num_attention_heads",
              "num_kv_heads": "num_key_value_heads", "max_seq_len": "max_position_embeddings",
              "layer_norm_eps": "rms_norm_eps"},
    "t5": {"hidden_size": "d_model", "ff_size": "d_ff", "head_size": "d_kv", "feed_forward": "feed_forward_proj",
           "layer_norm_eps": "layer_norm_epsilon"},
}
# pretrain.model keys that are training choices, not the checkpoint's shape: yours win.
OVERRIDABLE = ("dropout",)


def resolve_init_source(init_from: str, model_cfg, index: dict[str, Any], index_path: Path) -> ModelSource:
    folder = Path(init_from).expanduser().resolve()
    source = read_checkpoint_config(folder)
    family, architecture = source.family, source.architecture
    where = source.config_file
    if model_cfg.family != family:
        raise ValueError(
            f"{INIT_FROM}={init_from}: pretrain.model.family={model_cfg.family!r} but {where} describes a "
            f"{family!r} model; set pretrain.model.family: {family} (and the dataset.objective it trains)")
    _check_shape_keys(model_cfg, architecture, source, init_from)
    overrides = {key: getattr(model_cfg, key) for key in OVERRIDABLE if key in model_cfg.model_fields_set}
    source = dataclasses.replace(source, architecture={**architecture, **overrides})
    _check_data_fits(source.architecture, index, index_path, source, init_from)
    return source


def read_checkpoint_config(folder: Path) -> ModelSource:
    """Format, family and architecture of a checkpoint folder, from its config file alone."""
    if not folder.is_dir():
        raise FileNotFoundError(f"{INIT_FROM}: {folder} is not a directory; it must be a Hugging Face model "
                                "folder or the pretrain stage's model/ directory")
    from stages.models.build import CONFIG_NAME, MODEL_FAMILIES, WEIGHTS_NAME

    if (folder / CONFIG_NAME).is_file():  # ours
        config_file = folder / CONFIG_NAME
        fields = json.loads(config_file.read_text(encoding="utf-8"))
        family = fields.pop("family", "gpt")
        if family not in MODEL_FAMILIES:
            raise ValueError(f"{config_file}: unknown family {family!r}; known: {sorted(MODEL_FAMILIES)}")
        config = _config_or_error(lambda: MODEL_FAMILIES[family][0](**fields), config_file)
        return _source(folder, "pretrained", family, config_file, folder / WEIGHTS_NAME, config)
    config_file = folder / "config.json"
    weights = next((folder / name for name in HF_WEIGHT_FILES if (folder / name).is_file()), None)
    if not config_file.is_file() or weights is None:
        raise FileNotFoundError(
            f"{INIT_FROM}: {folder} holds neither {CONFIG_NAME} + {WEIGHTS_NAME} (a pretrain stage model/) nor "
            f"config.json + {' or '.join(HF_WEIGHT_FILES)} (a Hugging Face model folder)")
    hf_config = json.loads(config_file.read_text(encoding="utf-8"))
    model_type = hf_config.get("model_type")
    if model_type not in HF_FAMILIES:
        raise ValueError(f"{config_file}: model_type {model_type!r} cannot initialise pretraining; "
                         f"supported: {', '.join(HF_FAMILIES)}")
    family = HF_FAMILIES[model_type]
    config = _config_or_error(lambda: _hf_config_reader(model_type)(hf_config), config_file)
    return _source(folder, "hf", family, config_file, weights, config, model_type=model_type)


def _hf_config_reader(model_type: str):
    from stages.models.gpt.convert import gpt_config_from_hf
    from stages.models.bert.convert_albert import albert_config_from_hf
    from stages.models.bert.convert import bert_config_from_hf
    from stages.models.bert.convert_electra import electra_config_from_hf
    from stages.models.gpt.convert_llama import llama_config_from_hf
    from stages.models.t5.convert import t5_config_from_hf

    return {"gpt2": gpt_config_from_hf, "llama": llama_config_from_hf, "bert": bert_config_from_hf,
            "albert": albert_config_from_hf, "electra": electra_config_from_hf, "t5": t5_config_from_hf}[model_type]


def _config_or_error(make, config_file: Path):
    try:
        return make()
    except (KeyError, TypeError, ValueError) as error:
        raise ValueError(f"{config_file}: cannot be read as a model config ({type(error).__name__}: {error})") \
            from error


def _source(folder: Path, fmt: str, family: str, config_file: Path, weights_file: Path, config,
            model_type: str | None = None) -> ModelSource:
    architecture = dataclasses.asdict(config)
    return ModelSource(format=fmt, path=str(folder), family=family, config_file=str(config_file),
                       weights_file=str(weights_file), tokenizer=str(folder / "tokenizer.json"),
                       max_seq_len=architecture.get("max_seq_len"), model_type=model_type,
                       architecture=architecture)


def _key_name(source: ModelSource, key: str) -> str:
    if source.format != "hf":
        return key
    model_type = source.model_type
    names = HF_KEY_NAMES[model_type if model_type in ("llama", "albert", "electra") else source.family]
    return names.get(key, key)


def _check_shape_keys(model_cfg, architecture: dict[str, Any], source: ModelSource, init_from: str) -> None:
    """Keys the user gave in pretrain.model (or a preset gave) must agree with the checkpoint;
    keys left unset take the checkpoint's values."""
    given = model_cfg.architecture()
    disagree = [
        f"pretrain.model.{key}={given[key]!r} but {source.config_file} has "
        f"{_key_name(source, key)}={architecture[key]!r}"
        for key in sorted(model_cfg.model_fields_set)
        if key in given and key in architecture and key not in ("family", *OVERRIDABLE)
        and getattr(model_cfg, key, None) is not None and given[key] != architecture[key]]
    if disagree:
        raise ValueError(
            f"{INIT_FROM}={init_from}: the architecture comes from the checkpoint, and pretrain.model "
            f"disagrees with it: {'; '.join(disagree)}. Remove these keys from pretrain.model (or make them "
            "equal)")


def _check_data_fits(architecture: dict[str, Any], index: dict[str, Any], index_path: Path,
                     source: ModelSource, init_from: str) -> None:
    theirs = architecture["vocab_size"]
    if index["vocab_size"] > theirs or (index["vocab_size"] < theirs and source.family != "t5"):
        raise ValueError(
            f"{INIT_FROM}={init_from}: the dataset's vocabulary ({index_path} vocab_size={index['vocab_size']}) "
            f"differs from the checkpoint's ({source.config_file} {_key_name(source, 'vocab_size')}={theirs}); "
            f"token ids would mean other tokens. Reuse the checkpoint's tokenizer: tokenizer.from: {init_from} "
            "(then the tokenizer and dataset stages re-run)")
    positions = architecture.get("max_seq_len")  # T5: relative positions, no limit
    if positions is not None and index["seq_len"] > positions:
        raise ValueError(
            f"{INIT_FROM}={init_from}: the dataset's sequences are longer ({index_path} seq_len={index['seq_len']}) "
            f"than the checkpoint's positions ({source.config_file} {_key_name(source, 'max_seq_len')}="
            f"{positions}); set dataset.seq_len <= {positions}")
