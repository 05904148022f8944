"""Multi-head attention through `scaled_dot_product_attention`, with an optional KV cache
for incremental decoding.

    SelfAttention   fused q/k/v projection (GPT-2, BERT, T5 self-attention); grouped-query
                    attention and rotary positions for the llama GPT
    CrossAttention  queries from the decoder, keys/values from the encoder (T5)
    KVCache         keys and values of past positions, one per attention layer

Masks are either bool (True = may attend) or additive floats (0 or a large negative,
plus e.g. T5's relative position bias), broadcastable to (B, nh, T, S).

Shapes: B batch, T query length, S key length, C hidden size, nh heads, hs head size.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from stages.models.positions import apply_rotary


class KVCache:
    """Keys and values seen so far by one attention layer, (B, nh, S, hs) each (nh: the
    key/value heads, fewer than the query heads under grouped-query attention).

    Self-attention appends each step's keys/values; cross-attention stores the
    encoder's once (`static=True`) and reuses them at every decoding step.
    """

    def __init__(self, static: bool = False):
        self.static = static
        self.keys: torch.Tensor | None = None
        self.values: torch.Tensor | None = None

    @property
    def length(self) -> int:
        return 0 if self.keys is None else self.keys.size(2)

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Add (B, nh, T, hs) keys/values; returns all of them, (B, nh, S, hs)."""
        if self.keys is None:
            self.keys, self.values = k, v
        else:
            self.keys = torch.cat([self.keys, k], dim=2)
            self.values = torch.cat([self.values, v], dim=2)
        return self.keys, self.values

    def reorder(self, index: torch.Tensor) -> None:
        """Keep batch rows `index` (beam search picks which hypotheses survive)."""
        if self.keys is not None:
            self.keys, self.values = self.keys[index], self.values[index]


def split_heads(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    """(B, T, nh * hs) -> (B, nh, T, hs)."""
    B, T, _ = x.shape
    return x.view(B, T, num_heads, -1).transpose(1, 2)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """(B, nh, T, hs) -> (B, T, nh * hs)."""
    B, nh, T, hs = x.shape
    return x.transpose(1, 2).contiguous().view(B, T, nh * hs)


def causal_mask(query_len: int, key_len: int, device: torch.device | None = None) -> torch.Tensor:
    """(T, S) bool, True where query i (the last T of S positions) may see key j."""
    offset = key_len - query_len  # queries are the newest positions
    return torch.ones(query_len, key_len, dtype=torch.bool, device=device).tril(diagonal=offset)


def padding_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """(B, S) 1/0 -> (B, 1, 1, S) bool: every query may see the real keys."""
    return attention_mask.bool()[:, None, None, :]


def additive_mask(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """bool mask -> 0 where allowed, the dtype's most negative value where not (not -inf,
    so that a fully masked row gives a uniform softmax rather than NaN)."""
    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(~mask, torch.finfo(dtype).min)


class SelfAttention(nn.Module):
    """Multi-head self-attention with one fused q/k/v projection.

    head_size defaults to hidden_size // num_heads; T5 sets it (d_kv) independently.
    scale defaults to 1/sqrt(head_size); T5 uses 1 (folded into its init).
    num_kv_heads < num_heads is grouped-query attention (Ainslie et al. 2023): each
    key/value head serves num_heads / num_kv_heads consecutive query heads, as in Hugging
    Face's Llama; the KV cache then holds only the key/value heads.
    """

    def __init__(self, hidden_size: int, num_heads: int, *, head_size: int | None = None,
                 num_kv_heads: int | None = None, bias: bool = True, dropout: float = 0.0,
                 scale: float | None = None):
        super().__init__()
        self.num_heads = num_heads
        self.num_kv_heads = num_kv_heads or num_heads
        assert num_heads % self.num_kv_heads == 0, "query heads come in whole groups per key/value head"
        head_size = head_size or hidden_size // num_heads
        self.inner_size = num_heads * head_size
        self.kv_size = self.num_kv_heads * head_size
        self.dropout = dropout
        self.scale = scale
        self.qkv_proj = nn.Linear(hidden_size, self.inner_size + 2 * self.kv_size, bias=bias)
        self.out_proj = nn.Linear(self.inner_size, hidden_size, bias=bias)
        self.out_proj.is_residual_projection = True  # scaled init in GPT
        self.resid_dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, attn_mask: torch.Tensor | None = None, *,
                is_causal: bool = False, kv_cache: KVCache | None = None,
                rotary: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
        """x (B, T, C) -> (B, T, C). attn_mask broadcasts to (B, nh, T, S), where S = T
        plus the cached length; is_causal (with or without a cache) hides later keys.
        rotary: (cos, sin) of the T new positions (RotaryEmbedding.angles), applied to
        queries and keys before the keys are cached."""
        B, T, C = x.shape
        q, k, v = self.qkv_proj(x).split([self.inner_size, self.kv_size, self.kv_size], dim=2)
        q = split_heads(q, self.num_heads)  # (B, nh, T, hs)
        k = split_heads(k, self.num_kv_heads)  # (B, nkv, T, hs)
        v = split_heads(v, self.num_kv_heads)  # (B, nkv, T, hs)
        if rotary is not None:
            q, k = apply_rotary(q, *rotary), apply_rotary(k, *rotary)
        past = 0
        if kv_cache is not None:
            past = kv_cache.length
            k, v = kv_cache.append(k, v)  # (B, nkv, S, hs)
        if is_causal and (attn_mask is not None or past > 0):
            # SDPA's is_causal aligns the mask top-left; with a cache the queries are the
            # newest positions, so build it (a single new query sees everything).
            if T > 1:
                causal = causal_mask(T, k.size(2), x.device)  # (T, S)
                attn_mask = causal if attn_mask is None else _and_mask(attn_mask, causal)
            is_causal = False
        # SDPA repeats each key/value head for its query group itself (no copies made).
        grouped = {"enable_gqa": True} if self.num_kv_heads != self.num_heads else {}
        y = F.scaled_dot_product_attention(
            q, k, v, attn_mask=attn_mask, is_causal=is_causal,
            dropout_p=self.dropout if self.training else 0.0, scale=self.scale, **grouped,
        )  # (B, nh, T, hs)
        return self.resid_dropout(self.out_proj(merge_heads(y)))  # (B, T, C)


class CrossAttention(nn.Module):
    """Queries from x (B, T, C), keys and values from the encoder output (B, S, C)."""

    def __init__(self, hidden_size: int, num_heads: int, *, head_size: int | None = None,
                 bias: bool = True, dropout: float = 0.0, scale: float | None = None):
        super().__init__()
        self.num_heads = num_heads
        self.inner_size = num_heads * (head_size or hidden_size // num_heads)
        self.dropout = dropout
        self.scale = scale
        self.q_proj = nn.Linear(hidden_size, self.inner_size, bias=bias)
        self.kv_proj = nn.Linear(hidden_size, 2 * self.inner_size, bias=bias)
        self.out_proj = nn.Linear(self.inner_size, hidden_size, bias=bias)
        self.out_proj.is_residual_projection = True
        self.resid_dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, memory: torch.Tensor, attn_mask: torch.Tensor | None = None,
                *, kv_cache: KVCache | None = None) -> torch.Tensor:
        q = split_heads(self.q_proj(x), self.num_heads)  # (B, nh, T, hs)
        if kv_cache is not None and kv_cache.length > 0:
            k, v = kv_cache.keys, kv_cache.values  # encoder keys computed at the first step
        else:
            k, v = self.kv_proj(memory).split(self.inner_size, dim=2)  # 2 x (B, S, nh*hs)
            k = split_heads(k, self.num_heads)  # (B, nh, S, hs)
            v = split_heads(v, self.num_heads)  # (B, nh, S, hs)
            if kv_cache is not None:
                kv_cache.append(k, v)
        y = F.scaled_dot_product_attention(
            q, k, v, attn_mask=attn_mask, dropout_p=self.dropout if self.training else 0.0,
            scale=self.scale,
        )  # (B, nh, T, hs)
        return self.resid_dropout(self.out_proj(merge_heads(y)))  # (B, T, C)


def _and_mask(attn_mask: torch.Tensor, causal: torch.Tensor) -> torch.Tensor:
    if attn_mask.dtype == torch.bool:
        return attn_mask & causal
    return attn_mask + additive_mask(causal, attn_mask.dtype)
