"""Convert GPT weights to and from Hugging Face GPT-2 (`GPT2LMHeadModel`). Torch only;
transformers is not needed to convert, only to load the result.

    hf_state = gpt_to_hf_gpt2(model.state_dict(), num_layers=model.config.num_layers)
    hf_model = GPT2LMHeadModel(GPT2Config(**hf_gpt2_config(model.config)))
    hf_model.load_state_dict(hf_state, strict=False)   # HF may add non-persistent buffers

    state = hf_gpt2_to_gpt(hf_model.state_dict(), num_layers=12)

The architectures match exactly (pre-LN, tanh GELU, tied head); only names differ, and
GPT-2's linear layers are `Conv1D` modules that store weights as (in, out), the transpose
of `nn.Linear`'s (out, in).
"""

from __future__ import annotations

import torch

from stages.models.gpt.config import GPTConfig

# (our name, HF name, stored transposed in HF)
_GLOBAL_NAMES = [
    ("token_embedding.weight", "transformer.wte.weight", False),
    ("position_embedding.weight", "transformer.wpe.weight", False),
    ("final_norm.weight", "transformer.ln_f.weight", False),
    ("final_norm.bias", "transformer.ln_f.bias", False),
    ("lm_head.weight", "lm_head.weight", False),
]
_BLOCK_NAMES = [
    ("attn_norm.weight", "ln_1.weight", False),
    ("attn_norm.bias", "ln_1.bias", False),
    ("attn.qkv_proj.weight", "attn.c_attn.weight", True),
    ("attn.qkv_proj.bias", "attn.c_attn.bias", False),
    ("attn.out_proj.weight", "attn.c_proj.weight", True),
    ("attn.out_proj.bias", "attn.c_proj.bias", False),
    ("mlp_norm.weight", "ln_2.weight", False),
    ("mlp_norm.bias", "ln_2.bias", False),
    ("mlp.fc_in.weight", "mlp.c_fc.weight", True),
    ("mlp.fc_in.bias", "mlp.c_fc.bias", False),
    ("mlp.fc_out.weight", "mlp.c_proj.weight", True),
    ("mlp.fc_out.bias", "mlp.c_proj.bias", False),
]


def _name_pairs(num_layers: int) -> list[tuple[str, str, bool]]:
    pairs = list(_GLOBAL_NAMES)
    for i in range(num_layers):
        pairs += [(f"blocks.{i}.{ours}", f"transformer.h.{i}.{hf}", t) for ours, hf, t in _BLOCK_NAMES]
    return pairs


def gpt_to_hf_gpt2(state_dict: dict[str, torch.Tensor], num_layers: int) -> dict[str, torch.Tensor]:
    """Our GPT state dict -> GPT2LMHeadModel state dict."""
    return {
        hf: (state_dict[ours].t() if transposed else state_dict[ours]).contiguous()
        for ours, hf, transposed in _name_pairs(num_layers)
    }


def hf_gpt2_to_gpt(state_dict: dict[str, torch.Tensor], num_layers: int) -> dict[str, torch.Tensor]:
    """GPT2LMHeadModel state dict -> our GPT state dict (loads with strict=True)."""
    converted = {}
    for ours, hf, transposed in _name_pairs(num_layers):
        tensor = state_dict.get(hf, state_dict["transformer.wte.weight"] if hf == "lm_head.weight" else None)
        if tensor is None:
            raise KeyError(f"Hugging Face GPT-2 state dict has no {hf!r}")
        converted[ours] = (tensor.t() if transposed else tensor).contiguous()
    return converted


def hf_gpt2_config(config: GPTConfig) -> dict:
    """Keyword arguments for transformers.GPT2Config describing the same model."""
    return {
        "vocab_size": config.vocab_size,
        "n_positions": config.max_seq_len,
        "n_embd": config.hidden_size,
        "n_layer": config.num_layers,
        "n_head": config.num_heads,
        "n_inner": config.intermediate_size,
        "activation_function": "gelu_new",
        "resid_pdrop": config.dropout,
        "embd_pdrop": config.dropout,
        "attn_pdrop": config.dropout,
        "layer_norm_epsilon": config.layer_norm_eps,
        "tie_word_embeddings": True,
    }


def gpt_config_from_hf(hf_config: dict) -> GPTConfig:
    """Our GPTConfig from a Hugging Face GPT-2 config.json (as a dict)."""
    activation = hf_config.get("activation_function", "gelu_new")
    if activation not in ("gelu_new", "gelu_pytorch_tanh"):
        raise ValueError(f"only activation_function 'gelu_new' (tanh GELU) GPT-2s convert, got {activation!r}")
    inner = hf_config.get("n_inner")
    return GPTConfig(
        vocab_size=hf_config["vocab_size"], max_seq_len=hf_config["n_positions"],
        num_layers=hf_config["n_layer"], hidden_size=hf_config["n_embd"], num_heads=hf_config["n_head"],
        dropout=hf_config.get("resid_pdrop", 0.1), layer_norm_eps=hf_config.get("layer_norm_epsilon", 1e-5),
        **({"intermediate_size": inner} if inner else {}),
    )
