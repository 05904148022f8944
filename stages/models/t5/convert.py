"""Convert T5 weights and configs to and from Hugging Face `T5ForConditionalGeneration`
(v1.0: ReLU FFN, tied head; v1.1: gated-GELU FFN, untied head). Torch only.

    hf_state = t5_to_hf_t5(model.state_dict(), config)
    hf_model = T5ForConditionalGeneration(transformers.T5Config(**hf_t5_config(config)))
    hf_model.config.tie_word_embeddings = config.tie_word_embeddings  # see hf_t5_config
    hf_model.load_state_dict(hf_state)

    state = hf_t5_to_t5(hf_model.state_dict(), config)

Our attention fuses q/k/v (self) and k/v (cross) projections; Hugging Face keeps them
apart. The relative position bias lives in Hugging Face's first block of each stack.
"""

from __future__ import annotations

from typing import Any

import torch

from stages.models.t5.config import T5Config


def _ffn_names(config: T5Config) -> list[tuple[str, str]]:
    if config.feed_forward == "gated-gelu":
        return [("mlp.fc_gate.weight", "DenseReluDense.wi_0.weight"),
                ("mlp.fc_in.weight", "DenseReluDense.wi_1.weight"),
                ("mlp.fc_out.weight", "DenseReluDense.wo.weight")]
    return [("mlp.fc_in.weight", "DenseReluDense.wi.weight"), ("mlp.fc_out.weight", "DenseReluDense.wo.weight")]


def _name_pairs(config: T5Config) -> tuple[list[tuple[str, str]], list[tuple[str, list[str]]]]:
    """(one-to-one pairs, fused pairs: our tensor = concat of HF tensors on dim 0)."""
    pairs = [
        ("shared.weight", "shared.weight"),
        ("lm_head.weight", "lm_head.weight"),
        ("encoder.position_bias.relative_attention_bias.weight",
         "encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight"),
        ("decoder.position_bias.relative_attention_bias.weight",
         "decoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight"),
        ("encoder.final_norm.weight", "encoder.final_layer_norm.weight"),
        ("decoder.final_norm.weight", "decoder.final_layer_norm.weight"),
    ]
    fused = []
    for i in range(config.num_layers):
        ours, hf = f"encoder.blocks.{i}.", f"encoder.block.{i}.layer."
        pairs += [
            (ours + "attn_norm.weight", hf + "0.layer_norm.weight"),
            (ours + "attn.out_proj.weight", hf + "0.SelfAttention.o.weight"),
            (ours + "mlp_norm.weight", hf + "1.layer_norm.weight"),
        ] + [(ours + o, hf + "1." + h) for o, h in _ffn_names(config)]
        fused.append((ours + "attn.qkv_proj.weight", [hf + f"0.SelfAttention.{n}.weight" for n in "qkv"]))
    for i in range(config.num_decoder_layers):
        ours, hf = f"decoder.blocks.{i}.", f"decoder.block.{i}.layer."
        pairs += [
            (ours + "self_attn_norm.weight", hf + "0.layer_norm.weight"),
            (ours + "self_attn.out_proj.weight", hf + "0.SelfAttention.o.weight"),
            (ours + "cross_attn_norm.weight", hf + "1.layer_norm.weight"),
            (ours + "cross_attn.q_proj.weight", hf + "1.EncDecAttention.q.weight"),
            (ours + "cross_attn.out_proj.weight", hf + "1.EncDecAttention.o.weight"),
            (ours + "mlp_norm.weight", hf + "2.layer_norm.weight"),
        ] + [(ours + o, hf + "2." + h) for o, h in _ffn_names(config)]
        fused.append((ours + "self_attn.qkv_proj.weight", [hf + f"0.SelfAttention.{n}.weight" for n in "qkv"]))
        fused.append((ours + "cross_attn.kv_proj.weight", [hf + f"1.EncDecAttention.{n}.weight" for n in "kv"]))
    return pairs, fused


def t5_to_hf_t5(state_dict: dict[str, torch.Tensor], config: T5Config) -> dict[str, torch.Tensor]:
    """Our T5 state dict -> T5ForConditionalGeneration state dict (copies)."""
    pairs, fused = _name_pairs(config)
    hf = {h: state_dict[o].clone() for o, h in pairs}
    for ours, names in fused:
        for name, part in zip(names, state_dict[ours].chunk(len(names), dim=0)):
            hf[name] = part.clone()
    hf["encoder.embed_tokens.weight"] = hf["shared.weight"].clone()
    hf["decoder.embed_tokens.weight"] = hf["shared.weight"].clone()
    return hf


def hf_t5_to_t5(state_dict: dict[str, torch.Tensor], config: T5Config) -> dict[str, torch.Tensor]:
    """T5ForConditionalGeneration state dict -> ours (loads with strict=True)."""
    state_dict = dict(state_dict)
    if "lm_head.weight" not in state_dict:  # tied checkpoints may omit it
        state_dict["lm_head.weight"] = state_dict["shared.weight"]
    for stack in ("encoder", "decoder"):
        embed = state_dict.get(f"{stack}.embed_tokens.weight")
        if embed is not None and not torch.equal(embed, state_dict["shared.weight"]):
            raise ValueError(
                f"{stack}.embed_tokens differs from shared; our T5 has one shared token "
                "embedding (as the original T5 checkpoints do)"
            )
    pairs, fused = _name_pairs(config)
    ours = {}
    for o, h in pairs:
        if h not in state_dict:
            raise KeyError(f"Hugging Face T5 state dict has no {h!r}")
        ours[o] = state_dict[h].clone()
    for o, names in fused:
        ours[o] = torch.cat([state_dict[n] for n in names], dim=0)
    return ours


def hf_t5_config(config: T5Config) -> dict[str, Any]:
    """Keyword arguments for transformers.T5Config describing the same model.

    transformers 5 forces `tie_word_embeddings=True` on T5Config (it only uses the value
    passed in to decide whether to scale the decoder output). For an untied (v1.1)
    model, also set `hf_model_config.tie_word_embeddings = False` before building the
    model, or the separate LM head is tied to the embedding again.
    """
    return {
        "vocab_size": config.vocab_size,
        "d_model": config.hidden_size,
        "d_kv": config.head_size,
        "d_ff": config.ff_size,
        "num_layers": config.num_layers,
        "num_decoder_layers": config.num_decoder_layers,
        "num_heads": config.num_heads,
        "relative_attention_num_buckets": config.relative_attention_num_buckets,
        "relative_attention_max_distance": config.relative_attention_max_distance,
        "dropout_rate": config.dropout,
        "layer_norm_epsilon": config.layer_norm_eps,
        "feed_forward_proj": config.feed_forward,
        "tie_word_embeddings": config.tie_word_embeddings,
        "pad_token_id": config.pad_token_id,
        "eos_token_id": config.eos_token_id,
        "decoder_start_token_id": config.decoder_start_token_id,
    }


def t5_config_from_hf(hf_config: dict[str, Any]) -> T5Config:
    """Our T5Config from a Hugging Face T5 config.json (as a dict)."""
    feed_forward = hf_config.get("feed_forward_proj", "relu")
    if feed_forward not in ("relu", "gated-gelu"):
        raise ValueError(f"only feed_forward_proj 'relu' and 'gated-gelu' convert, got {feed_forward!r}")
    tied = hf_config.get("tie_word_embeddings", True)
    if "scale_decoder_outputs" in hf_config:  # written by transformers 5
        tied = tied and hf_config["scale_decoder_outputs"]
    return T5Config(
        vocab_size=hf_config["vocab_size"],
        hidden_size=hf_config["d_model"],
        head_size=hf_config["d_kv"],
        ff_size=hf_config["d_ff"],
        num_layers=hf_config["num_layers"],
        num_decoder_layers=hf_config.get("num_decoder_layers") or hf_config["num_layers"],
        num_heads=hf_config["num_heads"],
        relative_attention_num_buckets=hf_config.get("relative_attention_num_buckets", 32),
        relative_attention_max_distance=hf_config.get("relative_attention_max_distance", 128),
        feed_forward=feed_forward,
        tie_word_embeddings=tied,
        dropout=hf_config.get("dropout_rate", 0.1),
        layer_norm_eps=hf_config.get("layer_norm_epsilon", 1e-6),
        pad_token_id=hf_config.get("pad_token_id") or 0,
        eos_token_id=hf_config.get("eos_token_id") or 1,
        decoder_start_token_id=hf_config.get("decoder_start_token_id") or 0,
    )
