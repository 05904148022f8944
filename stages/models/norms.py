"""Normalisation layers. LayerNorm is `torch.nn.LayerNorm` (GPT-2, BERT); RMSNorm is
T5's: scale only, no bias, no mean subtraction, statistics in fp32."""

from __future__ import annotations

import torch
import torch.nn as nn


class RMSNorm(nn.Module):
    """x / sqrt(mean(x^2) + eps) * weight (T5's "LayerNorm").

    The mean square is taken in fp32 even for bf16/fp16 inputs: squares of activations
    overflow fp16 and lose precision in bf16. Matches Hugging Face's T5LayerNorm.
    """

    def __init__(self, hidden_size: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(hidden_size))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mean_square = x.float().pow(2).mean(-1, keepdim=True)  # (..., 1)
        x = x * torch.rsqrt(mean_square + self.eps)  # promotes to fp32
        if self.weight.dtype in (torch.float16, torch.bfloat16):
            x = x.to(self.weight.dtype)
        return self.weight * x
