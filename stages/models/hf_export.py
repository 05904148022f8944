"""Hugging Face folders: write one that `transformers.AutoModel*.from_pretrained` loads,
and read one (ours or a downloaded checkpoint) as a starting point. No transformers
import: config.json is written and read as plain JSON.

    export_hf(model, "out/hf", tokenizer_json="tokenizer.json", special_tokens={"eos_token": ...})
        # out/hf/config.json, model.safetensors, tokenizer.json, tokenizer_config.json,
        # special_tokens_map.json; generation_config.json for GPT and T5
    model = import_hf("out/hf")   # GPT, BertForPreTraining / Bert, or T5

With the tokenizer's special tokens, config.json and generation_config.json carry their
ids (bos, eos, pad; T5 also its decoder start), so that transformers' generate and
pipeline("text-generation") stop at the end of text and pad batches with the right token.

Supported: GPT <-> GPT2LMHeadModel, llama GPT <-> LlamaForCausalLM,
BertForPreTraining <-> BertForPreTraining, Bert <-> BertModel (variant albert:
AlbertForPreTraining, AlbertModel; a span boundary objective head is left out with a
warning, as transformers has none; variant electra: ElectraForPreTraining <->
ElectraForPreTraining with the generator as ElectraForMaskedLM in `<folder>/generator/`,
ElectraGenerator <-> ElectraForMaskedLM, Bert <-> ElectraModel),
T5 <-> T5ForConditionalGeneration. Not the
original Transformer (t5 variant transformer): transformers has no class for it
(`has_hf_class`), and export_hf refuses it. Each family converts its own models
(`gpt/hf.py`, `bert/hf.py`, `t5/hf.py`); this module writes and reads the folders.
"""

from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn
from safetensors.torch import save_file

from stages.models.bert.electra import ElectraForPreTraining, ElectraGenerator
from stages.models.bert.hf import (
    albert_from_hf,
    bert_from_hf,
    bert_to_hf,
    electra_from_hf,
    is_electra_pretraining,
)
from stages.models.bert.model import Bert, BertForPreTraining
from stages.models.gpt.config import GPTConfig
from stages.models.gpt.hf import gpt2_from_hf, gpt_to_hf, llama_from_hf
from stages.models.gpt.model import GPT
from stages.models.t5.hf import t5_from_hf, t5_to_hf
from stages.models.t5.model import T5
from stages.models.t5.transformer import Transformer
from stages.models.weights_file import read_weights

HF_CONFIG_NAME = "config.json"
HF_WEIGHTS_NAME = "model.safetensors"
HF_GENERATION_CONFIG_NAME = "generation_config.json"
# The classes transformers generates text with: they get a generation_config.json.
GENERATIVE_ARCHITECTURES = ("GPT2LMHeadModel", "LlamaForCausalLM", "T5ForConditionalGeneration")
GENERATION_TOKEN_IDS = ("bos_token_id", "eos_token_id", "pad_token_id", "decoder_start_token_id")
# ELECTRA's generator, a Hugging Face model of its own, inside the discriminator's folder
ELECTRA_GENERATOR_FOLDER = "generator"


def export_hf(model: nn.Module, directory: str | Path, tokenizer_json: str | Path | None = None,
              special_tokens: dict[str, str] | None = None) -> Path:
    """Write `model` as a Hugging Face folder. special_tokens (e.g. {"pad_token": "[PAD]"})
    go into tokenizer_config.json so that AutoTokenizer knows them."""
    directory = Path(directory)
    config, state, tied = _to_hf(model)  # first: a model it refuses leaves no folder behind
    if tokenizer_json is not None:
        # The model's own ids (T5's pad / eos, BERT's pad) stay; the ones it lacks (GPT's,
        # which its config never holds) come from the tokenizer.
        token_ids = special_token_ids(tokenizer_json, special_tokens or {})
        config.update({key: value for key, value in token_ids.items() if config.get(key) is None})
    directory.mkdir(parents=True, exist_ok=True)
    if isinstance(model, BertForPreTraining) and model.config.span_boundary_objective:
        # Left out rather than refused: the pretrain stage exports every run, and the
        # encoder and MLM head, all that fine-tuning and transformers read, convert whole.
        warnings.warn(f"export_hf: {directory} has no span boundary objective head (sbo.*): "
                      "Hugging Face's BertForPreTraining has none; the encoder and MLM head are "
                      "exported in full, and the pipeline's own save_pretrained folder (the "
                      "pretrain stage's model/) keeps the SBO head", stacklevel=2)
    for name in tied:  # Hugging Face re-ties these on load; storing them twice is an error
        state.pop(name, None)
    save_file({k: v.detach().contiguous().cpu() for k, v in state.items()}, str(directory / HF_WEIGHTS_NAME),
              metadata={"format": "pt"})
    (directory / HF_CONFIG_NAME).write_text(json.dumps(config, indent=2) + "\n")
    if set(config["architectures"]) & set(GENERATIVE_ARCHITECTURES):
        generation = {key: config[key] for key in GENERATION_TOKEN_IDS if config.get(key) is not None}
        context = config.get("n_positions", config.get("max_position_embeddings"))
        if context is not None:  # a causal LM: by default, generate no further than its positions reach
            generation["max_length"] = context
        (directory / HF_GENERATION_CONFIG_NAME).write_text(json.dumps(generation, indent=2) + "\n")
    if tokenizer_json is not None:
        shutil.copyfile(tokenizer_json, directory / "tokenizer.json")
        tokenizer_config = {"tokenizer_class": "PreTrainedTokenizerFast", **(special_tokens or {})}
        if "max_position_embeddings" in config or "n_positions" in config:
            tokenizer_config["model_max_length"] = config.get("max_position_embeddings", config.get("n_positions"))
        (directory / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=2) + "\n")
        # Older transformers read the roles from here rather than tokenizer_config.json.
        (directory / "special_tokens_map.json").write_text(json.dumps(special_tokens or {}, indent=2) + "\n")
    if isinstance(model, ElectraForPreTraining):  # as Google publishes ELECTRA: two models
        export_hf(model.generator, directory / ELECTRA_GENERATOR_FOLDER, tokenizer_json, special_tokens)
    return directory


def special_token_ids(tokenizer_json: str | Path, special_tokens: dict[str, Any]) -> dict[str, int]:
    """{"bos_token_id": ..., "eos_token_id": ..., "pad_token_id": ...}: the ids, in the
    tokenizer, of the roles `special_tokens` names (those it names and the vocabulary has)."""
    if not any(isinstance(special_tokens.get(role), str) for role in ("bos_token", "eos_token", "pad_token")):
        return {}  # nothing to look up: the tokenizer file is not even read
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(tokenizer_json))
    ids = {}
    for role in ("bos_token", "eos_token", "pad_token"):
        token = special_tokens.get(role)
        token_id = tokenizer.token_to_id(token) if isinstance(token, str) else None
        if token_id is not None:
            ids[f"{role}_id"] = token_id
    return ids


def import_hf(directory: str | Path) -> nn.Module:
    """Our model, with the weights of the Hugging Face folder `directory`."""
    directory = Path(directory)
    config_path, weights_path = directory / HF_CONFIG_NAME, directory / HF_WEIGHTS_NAME
    for path in (config_path, weights_path):
        if not path.is_file():
            raise FileNotFoundError(f"{path} not found: import_hf expects a Hugging Face model folder")
    hf_config = json.loads(config_path.read_text())
    state = read_weights(weights_path)  # errors name the file
    model_type = hf_config.get("model_type")
    if model_type == "electra":  # its generator may sit in a folder of its own
        model, state = electra_from_hf(hf_config, state, str(config_path), _electra_generator(directory, state))
    elif model_type in _FROM_HF:
        model, state = _FROM_HF[model_type](hf_config, state, str(config_path))
    else:
        raise ValueError(f"{config_path}: model_type {model_type!r} is not supported; "
                         "known: gpt2, llama, bert, albert, electra, t5")
    model.load_state_dict(state, strict=True)
    return model


# Hugging Face model_type -> the family's conversion (stages/models/<family>/hf.py)
_FROM_HF = {"gpt2": gpt2_from_hf, "llama": llama_from_hf, "bert": bert_from_hf, "albert": albert_from_hf,
            "t5": t5_from_hf}


def _electra_generator(directory: Path, state: dict[str, torch.Tensor],
                       ) -> tuple[dict[str, Any], dict[str, torch.Tensor]] | None:
    """The generator's config.json dict and weights from `<directory>/generator/` when the
    folder holds an ElectraForPreTraining (the discriminator); None for the other ELECTRA classes."""
    if not is_electra_pretraining(state):
        return None
    generator_dir = directory / ELECTRA_GENERATOR_FOLDER
    if not (generator_dir / HF_CONFIG_NAME).is_file() or not (generator_dir / HF_WEIGHTS_NAME).is_file():
        raise FileNotFoundError(
            f"{generator_dir}: an ELECTRA discriminator (ElectraForPreTraining) imports with its generator "
            f"(ElectraForMaskedLM: {HF_CONFIG_NAME} + {HF_WEIGHTS_NAME}) in this folder, as export_hf writes "
            "it; put the generator there, or continue pretraining from the discriminator alone with "
            "pretrain.init_from (a fresh generator)")
    return json.loads((generator_dir / HF_CONFIG_NAME).read_text()), read_weights(generator_dir / HF_WEIGHTS_NAME)


def has_hf_class(model: nn.Module) -> bool:
    """Whether transformers has a class that `export_hf` can write `model` as."""
    return not isinstance(model, Transformer)


def _to_hf(model: nn.Module) -> tuple[dict[str, Any], dict[str, torch.Tensor], list[str]]:
    """(config.json dict, HF state dict, names HF ties to another tensor)."""
    if not has_hf_class(model):
        raise ValueError(
            "export_hf: the original Transformer (family t5, variant transformer) has no Hugging Face "
            "transformers class to export to (T5ForConditionalGeneration has relative positions, RMSNorm "
            "and no biases); keep it in the pipeline's own format (save_pretrained / load_pretrained, the "
            "pretrain stage's model/ folder), which fine-tuning and evaluation read")
    if isinstance(model, GPT):
        return gpt_to_hf(model)
    if isinstance(model, (Bert, BertForPreTraining, ElectraForPreTraining, ElectraGenerator)):
        return bert_to_hf(model)
    if isinstance(model, T5):
        return t5_to_hf(model)
    raise TypeError(f"export_hf supports GPT, Bert, BertForPreTraining, ElectraForPreTraining, ElectraGenerator "
                    f"and T5, got {type(model).__name__}")
