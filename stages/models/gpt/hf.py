"""GPT as a Hugging Face model: config.json's dict and the state dict, both ways, for
variant gpt2 (GPT2LMHeadModel, `convert.py`) and llama (LlamaForCausalLM,
`convert_llama.py`). `stages/models/hf_export.py` writes and reads the folders.
"""

from __future__ import annotations

from typing import Any

import torch

from stages.models.gpt.convert import gpt_to_hf_gpt2, hf_gpt2_config, hf_gpt2_to_gpt
from stages.models.gpt.convert_llama import gpt_to_hf_llama, hf_llama_config, hf_llama_to_gpt, llama_config_from_hf
from stages.models.gpt.model import GPT, GPTConfig

HfModel = tuple[dict[str, Any], dict[str, torch.Tensor], list[str]]  # config, state, names HF ties


def gpt_to_hf(model: GPT) -> HfModel:
    """(config.json dict, HF state dict, names HF ties to another tensor)."""
    return _TO_HF[model.config.variant](model)


def _gpt2_to_hf(model: GPT) -> HfModel:
    config = {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], **hf_gpt2_config(model.config)}
    if model.config.vocab_size <= 50256:  # GPT2Config defaults to GPT-2's <|endoftext|> id
        config.update(bos_token_id=None, eos_token_id=None)
    return config, gpt_to_hf_gpt2(model.state_dict(), model.config.num_layers), ["lm_head.weight"]


def _llama_to_hf(model: GPT) -> HfModel:
    config = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], **hf_llama_config(model.config),
              # transformers 5 reads the rotary base here, older versions from rope_theta
              "rope_parameters": {"rope_type": "default", "rope_theta": model.config.rope_theta},
              # the tokenizer's ids are not Llama's 1 / 2; generation config must not guess
              "bos_token_id": None, "eos_token_id": None}
    tied = ["lm_head.weight"] if model.config.tie_word_embeddings else []
    return config, gpt_to_hf_llama(model.state_dict(), model.config), tied


_TO_HF = {"gpt2": _gpt2_to_hf, "llama": _llama_to_hf}


def gpt2_from_hf(hf_config: dict[str, Any], state: dict[str, torch.Tensor],
                 source: str) -> tuple[GPT, dict[str, torch.Tensor]]:
    """GPT2LMHeadModel or GPT2Model (no `transformer.` prefix) -> GPT and its state dict."""
    model = GPT(GPTConfig(
        vocab_size=hf_config["vocab_size"], max_seq_len=hf_config["n_positions"],
        num_layers=hf_config["n_layer"], hidden_size=hf_config["n_embd"], num_heads=hf_config["n_head"],
        dropout=hf_config.get("resid_pdrop", 0.1), layer_norm_eps=hf_config.get("layer_norm_epsilon", 1e-5),
        intermediate_size=hf_config.get("n_inner"),
    ))
    state = hf_gpt2_to_gpt({k if k.startswith(("transformer.", "lm_head")) else f"transformer.{k}": v
                            for k, v in state.items()}, model.config.num_layers)
    return model, state


def llama_from_hf(hf_config: dict[str, Any], state: dict[str, torch.Tensor],
                  source: str) -> tuple[GPT, dict[str, torch.Tensor]]:
    config = llama_config_from_hf(hf_config, source=source)
    return GPT(config), hf_llama_to_gpt(state, config)
