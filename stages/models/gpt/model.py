"""GPT-2 and Llama-style decoders in plain PyTorch, readable top to bottom (after nanoGPT).

variant "gpt2" (the default): pre-LayerNorm decoder blocks, learned absolute
positions, causal self-attention through `scaled_dot_product_attention`, a tanh-GELU MLP
(GPT-2's "gelu_new"), a final LayerNorm and an LM head tied to the token embedding. The
layout is GPT-2's, so weights map one-to-one onto Hugging Face `GPT2LMHeadModel` (see
`stages/models/gpt/convert.py`).

variant "llama": the same pre-norm decoder with Llama's parts swapped in (`parts.py`): RMSNorm,
rotary positions (no position embedding), grouped-query attention (num_kv_heads), a
SwiGLU MLP, no biases and an untied LM head; weights map onto `LlamaForCausalLM` (see
`stages/models/gpt/convert_llama.py`). Module names are shared where the role is shared, so
heads, generation, scorers and checkpointing treat both alike.

The attention and MLP blocks are shared with BERT and T5 (`attention.py`, `mlp.py`).
This file imports only torch: DeepSpeed, activation checkpointing and compilation are
applied from outside by the trainer.

    config = GPTConfig(vocab_size=8192, max_seq_len=128, num_layers=2, hidden_size=128,
                       num_heads=4)
    model = GPT(config)
    llama = GPT(GPTConfig(vocab_size=8192, max_seq_len=128, variant="llama",
                          num_heads=4, num_kv_heads=2))
    logits = model(input_ids)                             # (B, T, V); the loss is the clm objective's
    hidden = model.hidden_states(input_ids, attention_mask)  # (B, T, C) for task heads

Shapes: B batch, T sequence length, C hidden size, nh heads, hs head size (C // nh),
nkv key/value heads, V vocabulary size.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn

from stages.models.attention import KVCache, SelfAttention
from stages.models.gpt.config import GPTConfig
from stages.models.gpt.parts import DecoderParts, PARTS



class Block(nn.Module):
    """Pre-norm residual block: normalise, transform, add back."""

    def __init__(self, config: GPTConfig, parts: DecoderParts):
        super().__init__()
        self.attn_norm = parts.norm(config)
        self.attn = SelfAttention(config.hidden_size, config.num_heads, num_kv_heads=config.num_kv_heads,
                                  bias=parts.attention_bias, dropout=config.dropout)
        self.mlp_norm = parts.norm(config)
        self.mlp = parts.mlp(config)

    def forward(self, x: torch.Tensor, attn_mask: torch.Tensor | None,
                kv_cache: KVCache | None = None,
                rotary: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
        # attn_mask, when given, already combines causality and padding, (B, 1, T, T);
        # without one SDPA builds the causal mask itself (and picks a fused kernel).
        # rotary: (cos, sin) of the positions (llama); None for learned positions.
        x = x + self.attn(self.attn_norm(x), attn_mask, is_causal=attn_mask is None, kv_cache=kv_cache,
                          rotary=rotary)
        x = x + self.mlp(self.mlp_norm(x))
        return x


class GPT(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.config = config
        parts = PARTS[config.variant]  # the variant's norm, MLP, biases and positions (parts.py)
        self.token_embedding = nn.Embedding(config.vocab_size, config.hidden_size)
        # Positions: a learned table (gpt2) or rotations of queries and keys (llama).
        self.position_embedding, self.rotary = parts.positions(config)
        self.embedding_dropout = nn.Dropout(config.dropout)
        self.blocks = nn.ModuleList([Block(config, parts) for _ in range(config.num_layers)])
        self.final_norm = parts.norm(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        if config.tie_word_embeddings:
            # Weight tying: the output projection reuses the input embedding matrix (GPT-2).
            self.lm_head.weight = self.token_embedding.weight
        self.apply(self._init_weights)

    def _init_weights(self, module: nn.Module) -> None:
        # GPT-2 init: N(0, 0.02) everywhere; the projections that write into the residual
        # stream get std / sqrt(2 * num_layers) so the stream's variance does not grow
        # with depth (two residual additions per block).
        if isinstance(module, nn.Linear):
            std = 0.02
            if getattr(module, "is_residual_projection", False):
                std /= math.sqrt(2 * self.config.num_layers)
            nn.init.normal_(module.weight, mean=0.0, std=std)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        elif isinstance(module, nn.LayerNorm):
            nn.init.ones_(module.weight)
            nn.init.zeros_(module.bias)

    def hidden_states(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        *,
        kv_cache: list[KVCache] | None = None,
    ) -> torch.Tensor:
        """Final-LayerNorm hidden states, (B, T, C).

        attention_mask: optional (B, T), 1 for real tokens and 0 for padding. Padding keys
        are hidden from every query. Outputs at padding positions are meaningless; ignore
        them (set their labels to -100, pool over real tokens only).
        kv_cache: one `KVCache` per block (see `new_kv_cache`) for incremental decoding;
        input_ids are then the tokens after the cached ones.
        """
        B, T = input_ids.shape
        past = 0 if kv_cache is None else kv_cache[0].length
        if past + T > self.config.max_seq_len:
            raise ValueError(
                f"sequence length {past + T} exceeds max_seq_len={self.config.max_seq_len}; "
                "truncate the inputs or build the model with a larger max_seq_len"
            )
        if kv_cache is not None and attention_mask is not None:
            raise ValueError("attention_mask with kv_cache is not supported; decode unpadded prompts")
        positions = torch.arange(past, past + T, device=input_ids.device)  # (T,)
        attn_mask = None if attention_mask is None else causal_padding_mask(attention_mask)
        return self.hidden_states_at(input_ids, positions, attn_mask, kv_cache=kv_cache)

    def hidden_states_at(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        attn_mask: torch.Tensor | None,
        *,
        kv_cache: list[KVCache] | None = None,
    ) -> torch.Tensor:
        """Final-norm hidden states (B, T, C) of tokens at explicit positions, (T,) or
        (B, T), under a full attention mask, (B, 1, T, S) bool (True = may attend), or
        None for plain causal attention. `hidden_states` calls it; scorers that pack
        several continuations into one row (each branch restarting its positions) call
        it directly."""
        x = self.token_embedding(input_ids)  # (B, T, C)
        if self.position_embedding is not None:
            x = x + self.position_embedding(positions)  # (B, T, C)
        x = self.embedding_dropout(x)
        rotary = None if self.rotary is None else self.rotary.angles(positions)  # cos, sin
        for i, block in enumerate(self.blocks):
            x = block(x, attn_mask, None if kv_cache is None else kv_cache[i], rotary)  # (B, T, C)
        return self.final_norm(x)

    def new_kv_cache(self) -> list[KVCache]:
        """An empty cache for `hidden_states` / `forward`, one entry per block."""
        return [KVCache() for _ in self.blocks]

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        *,
        kv_cache: list[KVCache] | None = None,
    ) -> torch.Tensor:
        """Next-token logits (B, T, V): position t scores token t + 1. The loss is the
        causal-LM objective's (stages/objectives/clm/loss.py next_token_loss), the one
        place it is computed."""
        return self.lm_head(self.hidden_states(input_ids, attention_mask, kv_cache=kv_cache))  # (B, T, V)

    def num_parameters(self, exclude_position_embedding: bool = False) -> int:
        """Unique trainable parameters (the tied LM head is counted once)."""
        n = sum(p.numel() for p in self.parameters())
        if exclude_position_embedding and self.position_embedding is not None:
            n -= self.position_embedding.weight.numel()
        return n

    def flops_per_token(self, seq_len: int | None = None) -> int:
        """Training FLOPs per token (forward + backward), the PaLM appendix B estimate:

            6 * N  +  12 * num_layers * hidden_size * seq_len

        6N: every weight does one multiply-add (2 FLOPs) per token forward and twice that
        backward. N counts all parameters except the position embedding (a lookup, not a
        matmul); the tied token embedding is counted because the LM head is a matmul,
        an untied one (llama) is not: its lookup is free, the separate head counts.
        Grouped-query attention and SwiGLU need nothing special: N holds the smaller
        key/value projections and the three MLP matrices as they are. The second term is
        attention's QK^T and AV products over all num_heads query heads (nh * hs = C
        whatever the key/value heads), which scale with context length and have no
        weights. seq_len defaults to max_seq_len. Biases and norms are in N although
        they do fewer FLOPs; the error is negligible.
        """
        seq_len = self.config.max_seq_len if seq_len is None else seq_len
        n = self.num_parameters(exclude_position_embedding=True)
        if not self.config.tie_word_embeddings:
            n -= self.token_embedding.weight.numel()
        return 6 * n + 12 * self.config.num_layers * self.config.hidden_size * seq_len


def causal_padding_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """(B, T) 1/0 padding mask -> (B, 1, T, T) bool mask, True where a query may attend.

    Query i sees key j when j <= i and j is a real token. Every query also sees itself,
    so that a padding query (e.g. left padding before any real token) has at least one
    key: an all-False row would make softmax produce NaN, which would then leak into the
    gradients even though the output is ignored.
    """
    B, T = attention_mask.shape
    keep = attention_mask.bool()  # (B, T)
    causal = torch.ones(T, T, dtype=torch.bool, device=keep.device).tril()  # (T, T)
    diagonal = torch.eye(T, dtype=torch.bool, device=keep.device)  # (T, T)
    mask = causal & keep[:, None, :]  # (B, T, T): key j real and j <= i
    mask = mask | diagonal  # (B, T, T)
    return mask[:, None, :, :]  # (B, 1, T, T), broadcast over heads
