"""Convert llama-variant GPT weights to and from Hugging Face `LlamaForCausalLM`.
Torch only; transformers is not needed to convert, only to load the result.

    config = GPTConfig(vocab_size=32000, max_seq_len=2048, variant="llama", ...)
    hf_state = gpt_to_hf_llama(model.state_dict(), config)
    hf_model = LlamaForCausalLM(LlamaConfig(**hf_llama_config(config)))
    hf_model.load_state_dict(hf_state, strict=False)   # a tied head is re-tied by HF

    config = llama_config_from_hf(json.load(open("config.json")))
    state = hf_llama_to_gpt(hf_model.state_dict(), config)

The layouts match: RMSNorm before attention and MLP, rotary positions in the half-split
layout, grouped-query attention where key/value head j serves query heads
j * nh/nkv ... (j+1) * nh/nkv - 1, SwiGLU, no biases. Only names differ, and our
attention fuses q_proj, k_proj and v_proj into one (nh + 2 * nkv) * hs by C matrix,
concatenated in that order.
"""

from __future__ import annotations

from typing import Any

import torch

from stages.models.gpt.config import GPTConfig

# (our name, HF name) for tensors that convert one to one.
_GLOBAL_NAMES = [
    ("token_embedding.weight", "model.embed_tokens.weight"),
    ("final_norm.weight", "model.norm.weight"),
    ("lm_head.weight", "lm_head.weight"),
]
_BLOCK_NAMES = [
    ("attn_norm.weight", "input_layernorm.weight"),
    ("attn.out_proj.weight", "self_attn.o_proj.weight"),
    ("mlp_norm.weight", "post_attention_layernorm.weight"),
    ("mlp.fc_gate.weight", "mlp.gate_proj.weight"),
    ("mlp.fc_in.weight", "mlp.up_proj.weight"),
    ("mlp.fc_out.weight", "mlp.down_proj.weight"),
]
_QKV = ("self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight")


def _name_pairs(num_layers: int) -> list[tuple[str, str]]:
    pairs = list(_GLOBAL_NAMES)
    for i in range(num_layers):
        pairs += [(f"blocks.{i}.{ours}", f"model.layers.{i}.{hf}") for ours, hf in _BLOCK_NAMES]
    return pairs


def _qkv_sizes(config: GPTConfig) -> list[int]:
    return [config.num_heads * config.head_size] + 2 * [config.num_kv_heads * config.head_size]


def gpt_to_hf_llama(state_dict: dict[str, torch.Tensor], config: GPTConfig) -> dict[str, torch.Tensor]:
    """Our llama GPT state dict -> LlamaForCausalLM state dict."""
    _check_llama(config)
    converted = {hf: state_dict[ours].contiguous() for ours, hf in _name_pairs(config.num_layers)}
    for i in range(config.num_layers):
        parts = state_dict[f"blocks.{i}.attn.qkv_proj.weight"].split(_qkv_sizes(config), dim=0)
        for hf, part in zip(_QKV, parts, strict=True):
            converted[f"model.layers.{i}.{hf}"] = part.contiguous()
    return converted


def hf_llama_to_gpt(state_dict: dict[str, torch.Tensor], config: GPTConfig) -> dict[str, torch.Tensor]:
    """LlamaForCausalLM state dict -> our GPT state dict (loads with strict=True). A tied
    checkpoint may omit lm_head.weight: the embedding stands in for it."""
    _check_llama(config)

    def get(name: str) -> torch.Tensor:
        if name == "lm_head.weight" and name not in state_dict:
            name = "model.embed_tokens.weight"
        if name not in state_dict:
            raise KeyError(f"Hugging Face Llama state dict has no {name!r}")
        return state_dict[name]

    converted = {ours: get(hf).contiguous() for ours, hf in _name_pairs(config.num_layers)}
    for i in range(config.num_layers):
        converted[f"blocks.{i}.attn.qkv_proj.weight"] = torch.cat([get(f"model.layers.{i}.{hf}") for hf in _QKV])
    return converted


def hf_llama_config(config: GPTConfig) -> dict[str, Any]:
    """Keyword arguments for transformers.LlamaConfig describing the same model."""
    _check_llama(config)
    return {
        "vocab_size": config.vocab_size,
        "max_position_embeddings": config.max_seq_len,
        "hidden_size": config.hidden_size,
        "intermediate_size": config.intermediate_size,
        "num_hidden_layers": config.num_layers,
        "num_attention_heads": config.num_heads,
        "num_key_value_heads": config.num_kv_heads,
        "head_dim": config.head_size,
        "hidden_act": "silu",
        "rms_norm_eps": config.layer_norm_eps,
        "rope_theta": config.rope_theta,
        "attention_bias": False,
        "mlp_bias": False,
        "attention_dropout": config.dropout,
        "tie_word_embeddings": config.tie_word_embeddings,
    }


def llama_config_from_hf(hf_config: dict[str, Any], source: str = "config.json") -> GPTConfig:
    """A GPTConfig (variant llama) from a Hugging Face Llama config.json dict.
    Refuses what our decoder does not implement rather than converting it wrongly."""
    rope = hf_config.get("rope_parameters") or hf_config.get("rope_scaling") or {}
    rope_type = rope.get("rope_type", rope.get("type", "default"))
    unsupported = {
        "hidden_act": hf_config.get("hidden_act", "silu") != "silu",
        "attention_bias": bool(hf_config.get("attention_bias", False)),
        "mlp_bias": bool(hf_config.get("mlp_bias", False)),
        f"rope type {rope_type!r} (only the default, unscaled rotary positions)": rope_type != "default",
        "head_dim other than hidden_size / num_attention_heads": hf_config.get("head_dim") not in (
            None, hf_config["hidden_size"] // hf_config["num_attention_heads"]),
    }
    refused = [name for name, bad in unsupported.items() if bad]
    if refused:
        raise ValueError(f"{source}: this Llama uses {', '.join(refused)}, which the llama GPT does "
                         "not implement; only plain Llama checkpoints convert")
    return GPTConfig(
        variant="llama",
        vocab_size=hf_config["vocab_size"],
        max_seq_len=hf_config.get("max_position_embeddings", 2048),
        num_layers=hf_config["num_hidden_layers"],
        hidden_size=hf_config["hidden_size"],
        num_heads=hf_config["num_attention_heads"],
        num_kv_heads=hf_config.get("num_key_value_heads") or hf_config["num_attention_heads"],
        intermediate_size=hf_config["intermediate_size"],
        layer_norm_eps=hf_config.get("rms_norm_eps", 1e-6),
        rope_theta=float(rope.get("rope_theta", hf_config.get("rope_theta", 10000.0))),
        tie_word_embeddings=bool(hf_config.get("tie_word_embeddings", False)),
        dropout=hf_config.get("attention_dropout", 0.0),
    )


def _check_llama(config: GPTConfig) -> None:
    if config.variant != "llama":
        raise ValueError(f"convert_llama converts variant 'llama' GPTs, got {config.variant!r}; "
                         "GPT-2 ones convert with stages.models.gpt.convert")
