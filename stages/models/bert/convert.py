"""Convert BERT weights and configs to and from Hugging Face (`BertForPreTraining`, or a
bare `BertModel` such as sentence-transformers checkpoints). Torch only.

    hf_state = bert_to_hf_bert(model.state_dict(), num_layers=config.num_layers)
    hf_model = BertForPreTraining(BertConfig(**hf_bert_config(config)))
    hf_model.load_state_dict(hf_state, strict=False)   # HF adds non-persistent buffers

    state = hf_bert_to_bert(hf_state, num_layers)                        # BertForPreTraining
    state = hf_bert_to_bert(bert_model_state, num_layers, backbone_only=True)  # ours: Bert

Layouts match; only names differ, and our attention fuses query/key/value into one
projection (concatenated along the output dimension).
"""

from __future__ import annotations

from typing import Any

import torch

from stages.models.bert.config import BertConfig

_EMBEDDING_NAMES = [
    ("embeddings.word_embedding.weight", "embeddings.word_embeddings.weight"),
    ("embeddings.position_embedding.weight", "embeddings.position_embeddings.weight"),
    ("embeddings.token_type_embedding.weight", "embeddings.token_type_embeddings.weight"),
    ("embeddings.norm.weight", "embeddings.LayerNorm.weight"),
    ("embeddings.norm.bias", "embeddings.LayerNorm.bias"),
    ("pooler.weight", "pooler.dense.weight"),
    ("pooler.bias", "pooler.dense.bias"),
]
_BLOCK_NAMES = [
    ("attn.out_proj.weight", "attention.output.dense.weight"),
    ("attn.out_proj.bias", "attention.output.dense.bias"),
    ("attn_norm.weight", "attention.output.LayerNorm.weight"),
    ("attn_norm.bias", "attention.output.LayerNorm.bias"),
    ("mlp.fc_in.weight", "intermediate.dense.weight"),
    ("mlp.fc_in.bias", "intermediate.dense.bias"),
    ("mlp.fc_out.weight", "output.dense.weight"),
    ("mlp.fc_out.bias", "output.dense.bias"),
    ("mlp_norm.weight", "output.LayerNorm.weight"),
    ("mlp_norm.bias", "output.LayerNorm.bias"),
]
_HEAD_NAMES = [
    ("mlm_transform.weight", "cls.predictions.transform.dense.weight"),
    ("mlm_transform.bias", "cls.predictions.transform.dense.bias"),
    ("mlm_norm.weight", "cls.predictions.transform.LayerNorm.weight"),
    ("mlm_norm.bias", "cls.predictions.transform.LayerNorm.bias"),
    ("mlm_decoder.weight", "cls.predictions.decoder.weight"),
    ("mlm_bias", "cls.predictions.bias"),
    ("nsp.weight", "cls.seq_relationship.weight"),
    ("nsp.bias", "cls.seq_relationship.bias"),
]
_QKV = ("query", "key", "value")


def _name_pairs(num_layers: int, backbone_only: bool) -> list[tuple[str, str]]:
    ours_prefix, hf_prefix = ("", "") if backbone_only else ("backbone.", "bert.")
    pairs = [(ours_prefix + o, hf_prefix + h) for o, h in _EMBEDDING_NAMES]
    for i in range(num_layers):
        pairs += [
            (f"{ours_prefix}blocks.{i}.{o}", f"{hf_prefix}encoder.layer.{i}.{h}") for o, h in _BLOCK_NAMES
        ]
    if not backbone_only:
        pairs += _HEAD_NAMES
    return pairs


def _qkv_names(num_layers: int, backbone_only: bool) -> list[tuple[str, list[str]]]:
    ours_prefix, hf_prefix = ("", "") if backbone_only else ("backbone.", "bert.")
    return [
        (f"{ours_prefix}blocks.{i}.attn.qkv_proj.{p}",
         [f"{hf_prefix}encoder.layer.{i}.attention.self.{n}.{p}" for n in _QKV])
        for i in range(num_layers) for p in ("weight", "bias")
    ]


def bert_to_hf_bert(state_dict: dict[str, torch.Tensor], num_layers: int,
                    backbone_only: bool = False) -> dict[str, torch.Tensor]:
    """Our BertForPreTraining (or Bert, backbone_only) state dict -> Hugging Face
    BertForPreTraining (or BertModel) state dict. Tensors are copies."""
    hf = {h: state_dict[o].clone() for o, h in _name_pairs(num_layers, backbone_only)}
    for ours, names in _qkv_names(num_layers, backbone_only):
        for name, part in zip(names, state_dict[ours].chunk(3, dim=0)):
            hf[name] = part.clone()
    if not backbone_only:
        hf["cls.predictions.decoder.bias"] = hf["cls.predictions.bias"].clone()
    return hf


def hf_bert_to_bert(state_dict: dict[str, torch.Tensor], num_layers: int,
                    backbone_only: bool = False) -> dict[str, torch.Tensor]:
    """Hugging Face BertForPreTraining (or BertModel, backbone_only) state dict -> ours;
    loads with strict=True into BertForPreTraining (or Bert)."""
    state_dict = dict(state_dict)
    if backbone_only and any(k.startswith("bert.") for k in state_dict):
        state_dict = {k.removeprefix("bert."): v for k, v in state_dict.items()}
    if not backbone_only and "cls.predictions.decoder.weight" not in state_dict:
        state_dict["cls.predictions.decoder.weight"] = state_dict["bert.embeddings.word_embeddings.weight"]
    ours = {}
    for o, h in _name_pairs(num_layers, backbone_only):
        if h not in state_dict:
            raise KeyError(f"Hugging Face BERT state dict has no {h!r}")
        ours[o] = state_dict[h].clone()
    for o, names in _qkv_names(num_layers, backbone_only):
        ours[o] = torch.cat([state_dict[n] for n in names], dim=0)
    return ours


def hf_bert_config(config: BertConfig) -> dict[str, Any]:
    """Keyword arguments for transformers.BertConfig describing the same model."""
    return {
        "vocab_size": config.vocab_size,
        "hidden_size": config.hidden_size,
        "num_hidden_layers": config.num_layers,
        "num_attention_heads": config.num_heads,
        "intermediate_size": config.intermediate_size,
        "hidden_act": config.hidden_act,
        "hidden_dropout_prob": config.dropout,
        "attention_probs_dropout_prob": config.dropout,
        "max_position_embeddings": config.max_seq_len,
        "type_vocab_size": config.type_vocab_size,
        "layer_norm_eps": config.layer_norm_eps,
        "pad_token_id": config.pad_token_id,
        "tie_word_embeddings": True,
    }


def bert_config_from_hf(hf_config: dict[str, Any]) -> BertConfig:
    """Our BertConfig from a Hugging Face BERT config.json (as a dict)."""
    if hf_config.get("hidden_act", "gelu") != "gelu":
        raise ValueError(f"only hidden_act='gelu' BERTs convert, got {hf_config['hidden_act']!r}")
    if hf_config.get("position_embedding_type", "absolute") != "absolute":
        raise ValueError("only absolute position embeddings convert")
    return BertConfig(
        vocab_size=hf_config["vocab_size"],
        max_seq_len=hf_config.get("max_position_embeddings", 512),
        num_layers=hf_config["num_hidden_layers"],
        hidden_size=hf_config["hidden_size"],
        num_heads=hf_config["num_attention_heads"],
        intermediate_size=hf_config["intermediate_size"],
        type_vocab_size=hf_config.get("type_vocab_size", 2),
        dropout=hf_config.get("hidden_dropout_prob", 0.1),
        layer_norm_eps=hf_config.get("layer_norm_eps", 1e-12),
        pad_token_id=hf_config.get("pad_token_id") or 0,
    )
