"""Position-wise feed-forward blocks: a plain two-layer MLP (GPT-2, BERT, T5 v1.0) and a
gated one (T5 v1.1's gated GELU, Llama's SwiGLU). Dropout on the output only; the caller
adds the residual."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F


def gelu_tanh(x: torch.Tensor) -> torch.Tensor:
    """GPT-2's and T5 v1.1's GELU ("gelu_new" in Hugging Face)."""
    return F.gelu(x, approximate="tanh")


# Activation names as Hugging Face configs spell them.
ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "gelu": F.gelu,  # exact (erf) GELU: BERT
    "gelu_new": gelu_tanh,
    "relu": F.relu,
    "silu": F.silu,  # SwiGLU's gate (Llama)
}


class MLP(nn.Module):
    """fc_out(act(fc_in(x))): (B, T, C) -> (B, T, C)."""

    def __init__(self, hidden_size: int, inner_size: int, *, activation: str, bias: bool = True,
                 dropout: float = 0.0, inner_dropout: float = 0.0):
        super().__init__()
        self.activation = ACTIVATIONS[activation]
        self.fc_in = nn.Linear(hidden_size, inner_size, bias=bias)
        self.fc_out = nn.Linear(inner_size, hidden_size, bias=bias)
        self.fc_out.is_residual_projection = True  # scaled init in GPT
        self.inner_dropout = nn.Dropout(inner_dropout)  # T5 v1.0 drops after the ReLU
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.fc_in(x)  # (B, T, F)
        x = self.inner_dropout(self.activation(x))
        x = self.fc_out(x)  # (B, T, C)
        return self.dropout(x)


class GatedMLP(nn.Module):
    """fc_out(act(fc_gate(x)) * fc_in(x)) (GLU variants, Shazeer 2020): gated GELU in
    T5 v1.1, SwiGLU (activation "silu") in Llama, whose gate_proj / up_proj / down_proj
    are fc_gate / fc_in / fc_out."""

    def __init__(self, hidden_size: int, inner_size: int, *, activation: str, bias: bool = False,
                 dropout: float = 0.0):
        super().__init__()
        self.activation = ACTIVATIONS[activation]
        self.fc_gate = nn.Linear(hidden_size, inner_size, bias=bias)
        self.fc_in = nn.Linear(hidden_size, inner_size, bias=bias)
        self.fc_out = nn.Linear(inner_size, hidden_size, bias=bias)
        self.fc_out.is_residual_projection = True
        self.inner_dropout = nn.Dropout(dropout)  # T5 drops inside the FFN too
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate = self.activation(self.fc_gate(x))  # (B, T, F)
        x = gate * self.fc_in(x)  # (B, T, F)
        x = self.fc_out(self.inner_dropout(x))  # (B, T, C)
        return self.dropout(x)
