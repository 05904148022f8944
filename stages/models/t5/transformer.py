"""The original Transformer (Vaswani et al. 2017, "Attention Is All You Need") in plain
PyTorch: variant "transformer" of the encoder-decoder family, configured by `T5Config`.

The paper's choices, where T5 made others:
- post-LN blocks: x = LayerNorm(x + Dropout(sublayer(x))) (sec. 5.4), LayerNorm with a
  bias (eps 1e-5 unless set);
- sinusoidal absolute positions added to the embeddings (sec. 3.5), computed for any
  length, no parameters;
- one embedding matrix shared by source and target, multiplied by sqrt(d_model), and
  tied to the pre-softmax output projection (sec. 3.4), which is not rescaled;
- a ReLU feed-forward with biases, attention projections with biases, scaled dot-product
  attention (1/sqrt(d_k)) with d_k = d_model / h;
- dropout (P_drop, 0.1 in the paper) on each sublayer's output before the residual add,
  and on the sum of embeddings and positions (sec. 5.4); none inside attention or the
  feed-forward, which the paper does not mention.

No final LayerNorm after either stack: in a post-LN block the last operation already is a
LayerNorm, and the paper has none. `torch.nn.Transformer` adds one to each stack (its
`encoder.norm` / `decoder.norm`), which the parity test (tests/unit/test_transformer_parity.py)
replaces by `nn.Identity`; with it, this module equals `nn.Transformer` (norm_first=False,
ReLU) plus a scaled `nn.Embedding`, these positions and the tied projection.

The interface is T5's (`stages/models/t5/model.py`), so span-corruption pretraining, text-to-text
fine-tuning, KV-cached generation and the evaluate stage's t5 scorer use it unchanged:

    model = Transformer(T5Config(variant="transformer", vocab_size=37000, hidden_size=512,
                                 ff_size=2048, num_layers=6, num_heads=8))
    logits, loss = model(input_ids, attention_mask, labels=target_ids)  # teacher forcing
    memory = model.encode(input_ids, attention_mask)                    # (B, S, C)
    logits = model.decode(decoder_input_ids, memory, attention_mask, kv_cache=model.new_kv_cache())

Transformers has no class for this model: `hf_export` refuses it, and the pretrain stage
writes no hf/ folder for it.

Shapes: B batch, S source length, T target length, C d_model, F d_ff, V vocabulary size.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn

from stages.models.attention import CrossAttention, KVCache, SelfAttention, additive_mask, padding_mask
from stages.models.mlp import MLP
from stages.models.positions import sinusoidal_positions
from stages.models.t5.config import T5Config
from stages.models.t5.model import T5


def _attention_kwargs(config: T5Config) -> dict:
    # Dropout is applied by the block to the sublayer's output (the paper's placement),
    # so attention itself drops nothing.
    return dict(head_size=config.head_size, bias=True, dropout=0.0)


def _feed_forward(config: T5Config) -> MLP:
    return MLP(config.hidden_size, config.ff_size, activation="relu", bias=True)


class TransformerEncoderBlock(nn.Module):
    def __init__(self, config: T5Config):
        super().__init__()
        C = config.hidden_size
        self.attn = SelfAttention(C, config.num_heads, **_attention_kwargs(config))
        self.attn_norm = nn.LayerNorm(C, eps=config.layer_norm_eps)
        self.mlp = _feed_forward(config)
        self.mlp_norm = nn.LayerNorm(C, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor, attn_mask: torch.Tensor | None) -> torch.Tensor:
        x = self.attn_norm(x + self.dropout(self.attn(x, attn_mask)))  # (B, S, C)
        x = self.mlp_norm(x + self.dropout(self.mlp(x)))  # (B, S, C)
        return x


class TransformerDecoderBlock(nn.Module):
    def __init__(self, config: T5Config):
        super().__init__()
        C = config.hidden_size
        self.self_attn = SelfAttention(C, config.num_heads, **_attention_kwargs(config))
        self.self_attn_norm = nn.LayerNorm(C, eps=config.layer_norm_eps)
        self.cross_attn = CrossAttention(C, config.num_heads, **_attention_kwargs(config))
        self.cross_attn_norm = nn.LayerNorm(C, eps=config.layer_norm_eps)
        self.mlp = _feed_forward(config)
        self.mlp_norm = nn.LayerNorm(C, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor, memory: torch.Tensor, memory_mask: torch.Tensor | None,
                kv_cache: tuple[KVCache, KVCache] | None = None) -> torch.Tensor:
        self_cache, cross_cache = (None, None) if kv_cache is None else kv_cache
        attended = self.self_attn(x, is_causal=True, kv_cache=self_cache)  # (B, T, C)
        x = self.self_attn_norm(x + self.dropout(attended))
        attended = self.cross_attn(x, memory, memory_mask, kv_cache=cross_cache)  # (B, T, C)
        x = self.cross_attn_norm(x + self.dropout(attended))
        x = self.mlp_norm(x + self.dropout(self.mlp(x)))  # (B, T, C)
        return x


class TransformerEncoder(nn.Module):
    def __init__(self, config: T5Config):
        super().__init__()
        self.blocks = nn.ModuleList([TransformerEncoderBlock(config) for _ in range(config.num_layers)])

    def forward(self, x: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
        """Embedded source with positions (B, S, C) -> encoder output (B, S, C)."""
        mask = None if attention_mask is None else padding_mask(attention_mask)  # (B, 1, 1, S)
        for block in self.blocks:
            x = block(x, mask)
        return x


class TransformerDecoder(nn.Module):
    def __init__(self, config: T5Config):
        super().__init__()
        self.blocks = nn.ModuleList([TransformerDecoderBlock(config) for _ in range(config.num_decoder_layers)])

    def forward(self, x: torch.Tensor, memory: torch.Tensor, memory_attention_mask: torch.Tensor | None,
                kv_cache: list[tuple[KVCache, KVCache]] | None = None) -> torch.Tensor:
        """Embedded target with positions (B, T, C) and encoder output (B, S, C) -> (B, T, C)."""
        memory_mask = None
        if memory_attention_mask is not None:
            # additive, as T5's: a fully padded source row attends uniformly instead of giving NaN
            memory_mask = additive_mask(padding_mask(memory_attention_mask), x.dtype)  # (B, 1, 1, S)
        for i, block in enumerate(self.blocks):
            x = block(x, memory, memory_mask, None if kv_cache is None else kv_cache[i])  # (B, T, C)
        return x


class Transformer(nn.Module):
    """Encoder, decoder and one embedding matrix for source, target and output."""

    def __init__(self, config: T5Config):
        super().__init__()
        if config.variant != "transformer":
            raise ValueError(f"Transformer builds T5Config(variant='transformer'), got variant {config.variant!r}; "
                             "use stages.models.T5 for variant 't5'")
        self.config = config
        self.shared = nn.Embedding(config.vocab_size, config.hidden_size)
        self.encoder = TransformerEncoder(config)
        self.decoder = TransformerDecoder(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.lm_head.weight = self.shared.weight  # sec. 3.4: the pre-softmax projection is the embedding
        self.dropout = nn.Dropout(config.dropout)
        self.apply(self._init_weights)

    def _init_weights(self, module: nn.Module) -> None:
        # The paper gives no initialisation. As fairseq's and tensor2tensor's Transformers:
        # embedding N(0, d_model**-0.5), so that the sqrt(d_model)-scaled embedding has unit
        # variance like the sinusoids and the tied output's logits start near unit scale;
        # Xavier-uniform matrices (torch.nn.Transformer's too), zero biases.
        if module is self:
            nn.init.normal_(self.shared.weight, std=self.config.hidden_size**-0.5)
        elif isinstance(module, nn.Linear) and module is not self.lm_head:
            nn.init.xavier_uniform_(module.weight)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.LayerNorm):
            nn.init.ones_(module.weight)
            nn.init.zeros_(module.bias)

    def embed(self, ids: torch.Tensor, past: int = 0) -> torch.Tensor:
        """Token ids (B, T) at positions past..past+T-1 -> sqrt(C) * embedding + sinusoids,
        after dropout (B, T, C)."""
        x = self.shared(ids) * math.sqrt(self.config.hidden_size)  # (B, T, C)
        positions = torch.arange(past, past + ids.size(1), device=ids.device)  # (T,)
        x = x + sinusoidal_positions(positions, self.config.hidden_size).to(x.dtype)  # (T, C) broadcast
        return self.dropout(x)

    def encode(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Source ids (B, S) -> encoder output (B, S, C). attention_mask: 1 real, 0 pad."""
        return self.encoder(self.embed(input_ids), attention_mask)

    def decode(self, decoder_input_ids: torch.Tensor, memory: torch.Tensor,
               attention_mask: torch.Tensor | None = None,
               kv_cache: list[tuple[KVCache, KVCache]] | None = None) -> torch.Tensor:
        """Target ids (B, T), encoder output (B, S, C) and the source mask -> logits (B, T, V).
        With kv_cache (see `new_kv_cache`), decoder_input_ids follow the cached tokens and
        take the positions after them."""
        past = 0 if kv_cache is None else kv_cache[0][0].length
        x = self.decoder(self.embed(decoder_input_ids, past), memory, attention_mask, kv_cache)  # (B, T, C)
        return self.lm_head(x)  # (B, T, V)

    # The rest of the encoder-decoder interface is T5's, unchanged: teacher forcing from
    # shift_right(labels) with the loss over labels != -100, one self- and one
    # cross-attention cache per decoder block, and the parameter and FLOP counts (which
    # only read encoder, decoder and lm_head; sinusoids have no parameters and the tied
    # head counts once, as a matmul).
    new_kv_cache = T5.new_kv_cache
    shift_right = T5.shift_right
    forward = T5.forward
    num_parameters = T5.num_parameters
    flops_per_example = T5.flops_per_example
    flops_per_token = T5.flops_per_token
