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
(`has_hf_class`), and export_hf refuses it.
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

from stages.models.bert.model import Bert, BertForPreTraining
from stages.models.gpt.convert import gpt_to_hf_gpt2, hf_gpt2_config, hf_gpt2_to_gpt
from stages.models.bert.convert_albert import (
    albert_config_from_hf, albert_to_hf_albert, hf_albert_config, hf_albert_to_albert,
)
from stages.models.bert.convert import bert_config_from_hf, bert_to_hf_bert, hf_bert_config, hf_bert_to_bert
from stages.models.bert.convert_electra import (
    TIED_GENERATOR_NAME, electra_config_from_hf, electra_to_hf_electra, hf_electra_config,
    hf_electra_pretraining_to_electra, hf_electra_to_electra,
)
from stages.models.gpt.convert_llama import gpt_to_hf_llama, hf_llama_config, hf_llama_to_gpt, llama_config_from_hf
from stages.models.t5.convert import hf_t5_config, hf_t5_to_t5, t5_config_from_hf, t5_to_hf_t5
from stages.models.bert.electra import ElectraForPreTraining, ElectraGenerator
from stages.models.gpt.config import GPTConfig
from stages.models.gpt.model import GPT
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
    if model_type == "gpt2":
        model = GPT(GPTConfig(
            vocab_size=hf_config["vocab_size"], max_seq_len=hf_config["n_positions"],
            num_layers=hf_config["n_layer"], hidden_size=hf_config["n_embd"], num_heads=hf_config["n_head"],
            dropout=hf_config.get("resid_pdrop", 0.1), layer_norm_eps=hf_config.get("layer_norm_epsilon", 1e-5),
            intermediate_size=hf_config.get("n_inner"),
        ))
        state = hf_gpt2_to_gpt({k if k.startswith(("transformer.", "lm_head")) else f"transformer.{k}": v
                                for k, v in state.items()}, model.config.num_layers)
    elif model_type == "llama":
        config = llama_config_from_hf(hf_config, source=str(config_path))
        model = GPT(config)
        state = hf_llama_to_gpt(state, config)
    elif model_type == "bert":
        config = bert_config_from_hf(hf_config)
        pretraining = any(k.startswith("cls.predictions") for k in state)
        model = BertForPreTraining(config) if pretraining else Bert(config)
        state = hf_bert_to_bert(state, config.num_layers, backbone_only=not pretraining)
    elif model_type == "albert":
        config = albert_config_from_hf(hf_config, source=str(config_path))
        pretraining = any(k.startswith("predictions.") for k in state)
        model = BertForPreTraining(config) if pretraining else Bert(config)
        state = hf_albert_to_albert(state, config, backbone_only=not pretraining)
    elif model_type == "electra":
        model, state = _electra_from_hf(directory, hf_config, state)
    elif model_type == "t5":
        config = t5_config_from_hf(hf_config)
        model = T5(config)
        state = hf_t5_to_t5(state, config)
    else:
        raise ValueError(f"{config_path}: model_type {model_type!r} is not supported; "
                         "known: gpt2, llama, bert, albert, electra, t5")
    model.load_state_dict(state, strict=True)
    return model


def _electra_from_hf(directory: Path, hf_config: dict[str, Any],
                     state: dict[str, torch.Tensor]) -> tuple[nn.Module, dict[str, torch.Tensor]]:
    """ElectraForPreTraining (+ generator/) -> ElectraForPreTraining, ElectraForMaskedLM ->
    ElectraGenerator, ElectraModel -> Bert; the model and its state dict."""
    source = str(directory / HF_CONFIG_NAME)
    if any(k.startswith("generator_predictions.") for k in state):
        config = electra_config_from_hf(hf_config, source)
        return ElectraGenerator(config), hf_electra_to_electra(state, config, "generator")
    if not any(k.startswith("discriminator_predictions.") for k in state):
        config = electra_config_from_hf(hf_config, source)
        return Bert(config), hf_electra_to_electra(state, config, "model")
    generator_dir = directory / ELECTRA_GENERATOR_FOLDER
    if not (generator_dir / HF_CONFIG_NAME).is_file() or not (generator_dir / HF_WEIGHTS_NAME).is_file():
        raise FileNotFoundError(
            f"{generator_dir}: an ELECTRA discriminator (ElectraForPreTraining) imports with its generator "
            f"(ElectraForMaskedLM: {HF_CONFIG_NAME} + {HF_WEIGHTS_NAME}) in this folder, as export_hf writes "
            "it; put the generator there, or continue pretraining from the discriminator alone with "
            "pretrain.init_from (a fresh generator)")
    generator_config = json.loads((generator_dir / HF_CONFIG_NAME).read_text())
    config = electra_config_from_hf(hf_config, source, generator=generator_config)
    generator_state = read_weights(generator_dir / HF_WEIGHTS_NAME)
    return ElectraForPreTraining(config), hf_electra_pretraining_to_electra(state, generator_state, config)


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
    state = model.state_dict()
    if isinstance(model, GPT) and model.config.variant == "llama":
        config = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], **hf_llama_config(model.config),
                  # transformers 5 reads the rotary base here, older versions from rope_theta
                  "rope_parameters": {"rope_type": "default", "rope_theta": model.config.rope_theta},
                  # the tokenizer's ids are not Llama's 1 / 2; generation config must not guess
                  "bos_token_id": None, "eos_token_id": None}
        tied = ["lm_head.weight"] if model.config.tie_word_embeddings else []
        return config, gpt_to_hf_llama(state, model.config), tied
    if isinstance(model, GPT):
        config = {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], **hf_gpt2_config(model.config)}
        if model.config.vocab_size <= 50256:  # GPT2Config defaults to GPT-2's <|endoftext|> id
            config.update(bos_token_id=None, eos_token_id=None)
        return config, gpt_to_hf_gpt2(state, model.config.num_layers), ["lm_head.weight"]
    if isinstance(model, (Bert, ElectraForPreTraining, ElectraGenerator)) and model.config.variant == "electra":
        part, architecture, tied = {ElectraForPreTraining: ("discriminator", "ElectraForPreTraining", []),
                                    ElectraGenerator: ("generator", "ElectraForMaskedLM", [TIED_GENERATOR_NAME]),
                                    Bert: ("model", "ElectraModel", [])}[type(model)]
        config = {"model_type": "electra", "architectures": [architecture], **hf_electra_config(model.config)}
        return config, electra_to_hf_electra(state, model.config, part), tied
    if isinstance(model, (Bert, BertForPreTraining)) and model.config.variant == "albert":
        backbone_only = isinstance(model, Bert)
        architecture = "AlbertModel" if backbone_only else "AlbertForPreTraining"
        config = {"model_type": "albert", "architectures": [architecture], **hf_albert_config(model.config),
                  # the tokenizer's ids are not ALBERT's [CLS] 2 / [SEP] 3; nothing must guess
                  "bos_token_id": None, "eos_token_id": None}
        tied = [] if backbone_only else ["predictions.decoder.weight"]
        return config, albert_to_hf_albert(state, model.config, backbone_only), tied
    if isinstance(model, (Bert, BertForPreTraining)):
        backbone_only = isinstance(model, Bert)
        architecture = "BertModel" if backbone_only else "BertForPreTraining"
        config = {"model_type": "bert", "architectures": [architecture], **hf_bert_config(model.config)}
        tied = [] if backbone_only else ["cls.predictions.decoder.weight"]
        return config, bert_to_hf_bert(state, model.config.num_layers, backbone_only), tied
    if isinstance(model, T5):
        config = {"model_type": "t5", "architectures": ["T5ForConditionalGeneration"], **hf_t5_config(model.config)}
        tied = ["encoder.embed_tokens.weight", "decoder.embed_tokens.weight"]
        if model.config.tie_word_embeddings:
            tied.append("lm_head.weight")
        return config, t5_to_hf_t5(state, model.config), tied
    raise TypeError(f"export_hf supports GPT, Bert, BertForPreTraining, ElectraForPreTraining, ElectraGenerator "
                    f"and T5, got {type(model).__name__}")
