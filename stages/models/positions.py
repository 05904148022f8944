"""Position information: T5's relative position bias, rotary embeddings (RoPE) and the
original Transformer's sinusoids. Learned absolute positions are a plain `nn.Embedding`
in GPT and BERT.

Shapes: T query length, S key length, nh heads, hs head size.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn


def relative_position_bucket(relative_position: torch.Tensor, *, bidirectional: bool,
                             num_buckets: int, max_distance: int) -> torch.Tensor:
    """T5's bucketing of (key - query) offsets, as in Mesh TensorFlow and Hugging Face.

    Half of the buckets hold exact small distances, the other half logarithmically wider
    ranges up to max_distance; everything beyond shares the last bucket. Bidirectional
    (encoder) splits the buckets between keys before and after the query; causal
    (decoder) only has keys before it, so later keys all map to bucket 0.
    """
    buckets = torch.zeros_like(relative_position)
    if bidirectional:
        num_buckets //= 2
        buckets += (relative_position > 0).long() * num_buckets
        distance = relative_position.abs()
    else:
        distance = -torch.clamp(relative_position, max=0)
    max_exact = num_buckets // 2
    is_small = distance < max_exact
    # max(distance, 1) only keeps log() finite; small distances take the other branch.
    log_ratio = torch.log(distance.clamp(min=1).float() / max_exact) / math.log(max_distance / max_exact)
    large = max_exact + (log_ratio * (num_buckets - max_exact)).long()
    large = torch.clamp(large, max=num_buckets - 1)
    return buckets + torch.where(is_small, distance, large)


class RelativePositionBias(nn.Module):
    """A learned scalar per (bucket, head), added to attention scores (T5). One instance
    per stack (encoder, decoder), shared by all its layers."""

    def __init__(self, num_heads: int, *, bidirectional: bool, num_buckets: int = 32,
                 max_distance: int = 128):
        super().__init__()
        self.bidirectional = bidirectional
        self.num_buckets = num_buckets
        self.max_distance = max_distance
        self.relative_attention_bias = nn.Embedding(num_buckets, num_heads)

    def forward(self, query_len: int, key_len: int, past: int = 0) -> torch.Tensor:
        """(1, nh, T, S) bias for queries at positions past..past+T-1 over keys 0..S-1."""
        device = self.relative_attention_bias.weight.device
        query_pos = torch.arange(past, past + query_len, device=device)[:, None]  # (T, 1)
        key_pos = torch.arange(key_len, device=device)[None, :]  # (1, S)
        buckets = relative_position_bucket(
            key_pos - query_pos, bidirectional=self.bidirectional,
            num_buckets=self.num_buckets, max_distance=self.max_distance,
        )  # (T, S)
        bias = self.relative_attention_bias(buckets)  # (T, S, nh)
        return bias.permute(2, 0, 1)[None]  # (1, nh, T, S)


class RotaryEmbedding(nn.Module):
    """Rotary position embedding (Su et al. 2021): rotate pairs of q/k channels by an
    angle proportional to the position, so q.k depends only on the offset. Half-split
    layout (GPT-NeoX, Llama in Hugging Face). Used by the `llama` GPT architecture.

    No buffers: the frequencies are recomputed in fp32 from head_size and base on every
    call (a few hundred numbers), so that a bf16 cast of the module (DeepSpeed's bf16)
    cannot round them, and the state dict stays free of them.
    """

    def __init__(self, head_size: int, base: float = 10000.0):
        super().__init__()
        if head_size % 2:
            raise ValueError(f"rotary embeddings need an even head size, got {head_size}")
        self.head_size = head_size
        self.base = base

    def angles(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """positions (T,) or (B, T) -> (cos, sin), each (T, hs/2) or (B, 1, T, hs/2), fp32."""
        exponents = torch.arange(0, self.head_size, 2, device=positions.device).float() / self.head_size
        inv_freq = 1.0 / (self.base ** exponents)  # (hs/2,), as Hugging Face computes it
        angles = positions.float()[..., None] * inv_freq  # (..., T, hs/2)
        if angles.dim() == 3:
            angles = angles[:, None]  # (B, 1, T, hs/2): broadcast over heads
        return angles.cos(), angles.sin()

    def forward(self, x: torch.Tensor, past: int = 0) -> torch.Tensor:
        """x (B, nh, T, hs) at positions past..past+T-1 -> rotated, same shape."""
        positions = torch.arange(past, past + x.size(2), device=x.device)  # (T,)
        return apply_rotary(x, *self.angles(positions))


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate x (B, nh, T, hs) by the angles of `RotaryEmbedding.angles` (cast to x's
    dtype first, as Hugging Face does): channel i pairs with channel i + hs/2."""
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    x1, x2 = x.chunk(2, dim=-1)  # 2 x (B, nh, T, hs/2)
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)


def sinusoidal_positions(positions: torch.Tensor, dim: int, base: float = 10000.0) -> torch.Tensor:
    """The original Transformer's absolute positions (Vaswani et al. 2017, sec. 3.5):
    PE[pos, 2i] = sin(pos / base**(2i/dim)), PE[pos, 2i+1] = cos(pos / base**(2i/dim)).

    positions (T,) -> (T, dim) fp32. No parameters and no buffer: computed for any length
    (a model trained on short rows still has positions for long ones) and in fp32 whatever
    the model's dtype, as RotaryEmbedding does."""
    exponents = torch.arange(0, dim, 2, device=positions.device).float() / dim  # (ceil(dim/2),)
    angles = positions.float()[:, None] / base**exponents  # (T, ceil(dim/2))
    # interleave: sin in the even channels, cos in the odd ones
    return torch.stack([angles.sin(), angles.cos()], dim=-1).flatten(1)[:, :dim]  # (T, dim)
