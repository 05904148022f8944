"""The parts a GPT variant puts into the one pre-norm decoder (`model.py`), chosen once by
`GPT.__init__` from `PARTS[config.variant]`: the blocks and the model read no variant.

    gpt2   LayerNorm, tanh-GELU MLP, biased attention, a learned position table
    llama  RMSNorm, SwiGLU MLP, no biases, rotary positions

A new variant is a new row here (and its config rules), not a branch in the forward pass.
Each builder takes the model's GPTConfig.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch.nn as nn

from stages.models.mlp import MLP, GatedMLP
from stages.models.norms import RMSNorm
from stages.models.positions import RotaryEmbedding


@dataclass(frozen=True)
class DecoderParts:
    norm: Callable[..., nn.Module]  # config -> the norm before each sublayer and at the end
    mlp: Callable[..., nn.Module]  # config -> the feed-forward sublayer
    attention_bias: bool  # biases in the query/key/value and output projections
    # config -> (learned position table, rotary embedding): exactly one is a module
    positions: Callable[..., tuple[nn.Module | None, nn.Module | None]]


def layer_norm(config) -> nn.Module:
    return nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)


def rms_norm(config) -> nn.Module:
    return RMSNorm(config.hidden_size, eps=config.layer_norm_eps)


def gelu_mlp(config) -> nn.Module:
    # tanh GELU is GPT-2's activation; exact GELU would break Hugging Face parity
    return MLP(config.hidden_size, config.intermediate_size, activation="gelu_new", dropout=config.dropout)


def swiglu_mlp(config) -> nn.Module:
    return GatedMLP(config.hidden_size, config.intermediate_size, activation="silu", dropout=config.dropout)


def learned_positions(config) -> tuple[nn.Module | None, nn.Module | None]:
    return nn.Embedding(config.max_seq_len, config.hidden_size), None


def rotary_positions(config) -> tuple[nn.Module | None, nn.Module | None]:
    return None, RotaryEmbedding(config.head_size, base=config.rope_theta)


PARTS = {
    "gpt2": DecoderParts(norm=layer_norm, mlp=gelu_mlp, attention_bias=True, positions=learned_positions),
    "llama": DecoderParts(norm=rms_norm, mlp=swiglu_mlp, attention_bias=False, positions=rotary_positions),
}
