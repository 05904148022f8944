"""Convert ALBERT (variant "albert" of the BERT family) weights and configs to and from
Hugging Face `AlbertForPreTraining`, or a bare `AlbertModel` (backbone_only). Torch only.

    hf_state = albert_to_hf_albert(model.state_dict(), config)
    hf_model = AlbertForPreTraining(AlbertConfig(**hf_albert_config(config)))
    hf_model.load_state_dict(hf_state, strict=False)   # HF adds non-persistent buffers

    config = albert_config_from_hf(json.load(open("config.json")))
    state = hf_albert_to_albert(hf_model.state_dict(), config)   # loads strictly

Hugging Face stores the distinct layers as `num_hidden_groups` layer groups and applies
group int(i / (L / groups)) at layer i. Ours converts when that is one group (share_layers
"all": ALBERT's checkpoints) or one group per layer ("none"); our blocks.i then come from
group 0 or group i. Attention-only and FFN-only sharing (the paper's ablations) have no
Hugging Face layout and are refused, as are groups of several inner layers.
"""

from __future__ import annotations

from typing import Any

import torch

from stages.models.bert.config import BertConfig
from stages.models.bert.convert import hf_bert_config

_EMBEDDING_NAMES = [
    ("embeddings.word_embedding.weight", "embeddings.word_embeddings.weight"),
    ("embeddings.position_embedding.weight", "embeddings.position_embeddings.weight"),
    ("embeddings.token_type_embedding.weight", "embeddings.token_type_embeddings.weight"),
    ("embeddings.norm.weight", "embeddings.LayerNorm.weight"),
    ("embeddings.norm.bias", "embeddings.LayerNorm.bias"),
    ("embedding_projection.weight", "encoder.embedding_hidden_mapping_in.weight"),
    ("embedding_projection.bias", "encoder.embedding_hidden_mapping_in.bias"),
    ("pooler.weight", "pooler.weight"),
    ("pooler.bias", "pooler.bias"),
]
_BLOCK_NAMES = [
    ("attn.out_proj.weight", "attention.dense.weight"),
    ("attn.out_proj.bias", "attention.dense.bias"),
    ("attn_norm.weight", "attention.LayerNorm.weight"),
    ("attn_norm.bias", "attention.LayerNorm.bias"),
    ("mlp.fc_in.weight", "ffn.weight"),
    ("mlp.fc_in.bias", "ffn.bias"),
    ("mlp.fc_out.weight", "ffn_output.weight"),
    ("mlp.fc_out.bias", "ffn_output.bias"),
    ("mlp_norm.weight", "full_layer_layer_norm.weight"),
    ("mlp_norm.bias", "full_layer_layer_norm.bias"),
]
_HEAD_NAMES = [
    ("mlm_transform.weight", "predictions.dense.weight"),
    ("mlm_transform.bias", "predictions.dense.bias"),
    ("mlm_norm.weight", "predictions.LayerNorm.weight"),
    ("mlm_norm.bias", "predictions.LayerNorm.bias"),
    ("mlm_decoder.weight", "predictions.decoder.weight"),
    ("mlm_bias", "predictions.bias"),
    ("nsp.weight", "sop_classifier.classifier.weight"),
    ("nsp.bias", "sop_classifier.classifier.bias"),
]
_QKV = ("query", "key", "value")
# share_layers -> Hugging Face num_hidden_groups, as a function of num_layers
_GROUPS = {"all": lambda num_layers: 1, "none": lambda num_layers: num_layers}


def _num_groups(config: BertConfig) -> int:
    if config.variant != "albert":
        raise ValueError(f"convert_albert converts variant 'albert' BERTs, got {config.variant!r}; "
                         "BERT ones convert with stages.models.bert.convert")
    if config.share_layers not in _GROUPS:
        raise ValueError(
            f"share_layers={config.share_layers!r} has no Hugging Face ALBERT layout (AlbertModel shares "
            "whole layers only); share_layers 'all' or 'none' convert")
    return _GROUPS[config.share_layers](config.num_layers)


def _name_pairs(config: BertConfig, backbone_only: bool) -> list[tuple[str, str | list[str]]]:
    """(ours, HF) for every tensor of ours: layer i reads group i * groups // L."""
    ours_prefix, hf_prefix = ("", "") if backbone_only else ("backbone.", "albert.")
    groups = _num_groups(config)
    pairs = [(ours_prefix + o, hf_prefix + h) for o, h in _EMBEDDING_NAMES]
    for i in range(config.num_layers):
        group = f"{hf_prefix}encoder.albert_layer_groups.{i * groups // config.num_layers}.albert_layers.0."
        pairs += [(f"{ours_prefix}blocks.{i}.{o}", group + h) for o, h in _BLOCK_NAMES]
        pairs += [(f"{ours_prefix}blocks.{i}.attn.qkv_proj.{p}", [f"{group}attention.{n}.{p}" for n in _QKV])
                  for p in ("weight", "bias")]
    if not backbone_only:
        pairs += _HEAD_NAMES
    return pairs


def albert_to_hf_albert(state_dict: dict[str, torch.Tensor], config: BertConfig,
                        backbone_only: bool = False) -> dict[str, torch.Tensor]:
    """Our ALBERT BertForPreTraining (or Bert, backbone_only) state dict -> Hugging Face
    AlbertForPreTraining (or AlbertModel). Shared layers are written once. Tensors are copies."""
    hf: dict[str, torch.Tensor] = {}
    for ours, theirs in _name_pairs(config, backbone_only):
        if isinstance(theirs, list):  # our fused q/k/v -> query, key, value
            for name, part in zip(theirs, state_dict[ours].chunk(3, dim=0), strict=True):
                hf[name] = part.clone()
        elif theirs not in hf:
            hf[theirs] = state_dict[ours].clone()
    if not backbone_only:
        hf["predictions.decoder.bias"] = hf["predictions.bias"].clone()
    return hf


def hf_albert_to_albert(state_dict: dict[str, torch.Tensor], config: BertConfig,
                        backbone_only: bool = False) -> dict[str, torch.Tensor]:
    """Hugging Face AlbertForPreTraining (or AlbertModel, backbone_only) state dict -> ours;
    loads with strict=True into BertForPreTraining (or Bert) of `config`. A shared layer's
    tensors go to every layer that applies it."""
    state_dict = dict(state_dict)
    if backbone_only and any(k.startswith("albert.") for k in state_dict):
        state_dict = {k.removeprefix("albert."): v for k, v in state_dict.items()}
    if not backbone_only and "predictions.decoder.weight" not in state_dict:  # tied: stored once
        state_dict["predictions.decoder.weight"] = state_dict["albert.embeddings.word_embeddings.weight"]

    def get(name: str) -> torch.Tensor:
        if name not in state_dict:
            raise KeyError(f"Hugging Face ALBERT state dict has no {name!r}")
        return state_dict[name]

    ours = {}
    for o, theirs in _name_pairs(config, backbone_only):
        ours[o] = torch.cat([get(n) for n in theirs]) if isinstance(theirs, list) else get(theirs).clone()
    return ours


def hf_albert_config(config: BertConfig) -> dict[str, Any]:
    """Keyword arguments for transformers.AlbertConfig describing the same model: BERT's,
    plus the factorized embedding width and the layer groups."""
    return {**hf_bert_config(config), "embedding_size": config.embedding_size,
            "num_hidden_groups": _num_groups(config), "inner_group_num": 1,
            "classifier_dropout_prob": config.dropout}


def albert_config_from_hf(hf_config: dict[str, Any], source: str = "config.json") -> BertConfig:
    """Our BertConfig (variant albert) from a Hugging Face ALBERT config.json dict.
    Refuses what our encoder does not implement rather than converting it wrongly."""
    num_layers, groups = hf_config["num_hidden_layers"], hf_config.get("num_hidden_groups", 1)
    activation = hf_config.get("hidden_act", "gelu_new")
    unsupported = {
        f"hidden_act {activation!r} (only 'gelu' and 'gelu_new')": activation not in ("gelu", "gelu_new"),
        "position_embedding_type other than 'absolute'":
            hf_config.get("position_embedding_type", "absolute") != "absolute",
        f"inner_group_num={hf_config.get('inner_group_num', 1)} (only 1)": hf_config.get("inner_group_num", 1) != 1,
        f"num_hidden_groups={groups} (only 1 = all layers shared, or num_hidden_layers={num_layers})":
            groups not in (1, num_layers),
    }
    refused = [name for name, bad in unsupported.items() if bad]
    if refused:
        raise ValueError(f"{source}: this ALBERT uses {', '.join(refused)}, which the albert variant "
                         "does not implement; only plain ALBERT checkpoints convert")
    return BertConfig(
        variant="albert",
        vocab_size=hf_config["vocab_size"],
        max_seq_len=hf_config.get("max_position_embeddings", 512),
        num_layers=num_layers,
        hidden_size=hf_config["hidden_size"],
        embedding_size=hf_config.get("embedding_size", 128),
        num_heads=hf_config["num_attention_heads"],
        intermediate_size=hf_config["intermediate_size"],
        type_vocab_size=hf_config.get("type_vocab_size", 2),
        dropout=hf_config.get("hidden_dropout_prob", 0.0),
        layer_norm_eps=hf_config.get("layer_norm_eps", 1e-12),
        pad_token_id=hf_config.get("pad_token_id") or 0,
        share_layers="all" if groups == 1 else "none",
        hidden_act=activation,
    )
