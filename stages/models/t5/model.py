"""T5 in plain PyTorch (Raffel et al. 2020), weight-compatible with Hugging Face
`T5ForConditionalGeneration`, v1.0 and v1.1 layouts (see `convert.py`).

Encoder-decoder; pre-norm blocks with RMSNorm and no biases anywhere; no absolute
positions, instead a learned relative position bias (bucketed offsets, one table per
stack, bidirectional in the encoder, causal in the decoder) added to the attention
scores; attention without the 1/sqrt(hs) scale (folded into the init). Feed-forward:
ReLU (v1.0, "relu") or gated tanh-GELU (v1.1, "gated-gelu"). The LM head is tied to the
shared embedding, with the decoder output scaled by hidden_size**-0.5 first (v1.0), or
a separate matrix without scaling (v1.1, tie_word_embeddings=False).

T5Config also describes the original Transformer (variant="transformer": post-LN,
sinusoidal positions, biases; `stages/models/t5/transformer.py`), the other model of this
family: same config fields, same interface, so every t5 path trains and decodes it.

    model = T5(T5Config(vocab_size=32128))
    logits, loss = model(input_ids, attention_mask, labels=target_ids)  # teacher forcing
    memory = model.encode(input_ids, attention_mask)                    # (B, S, C)

The loss in `forward(labels=)` is fine-tuning's seq2seq loss, the one path seq2seq and
text-to-text fine-tuning train with (stages/finetune/seq2seq, text_to_text). Pretraining
calls the model without labels: span corruption's loss is its objective's
(stages/objectives/span/loss.py), as every pretraining loss is.

Shapes: B batch, S source length, T target length, C hidden size (d_model),
nh heads, V vocabulary size.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from stages.data.masking import IGNORE_INDEX
from stages.models.attention import CrossAttention, KVCache, SelfAttention, additive_mask, causal_mask, padding_mask
from stages.models.mlp import MLP, GatedMLP
from stages.models.norms import RMSNorm
from stages.models.positions import RelativePositionBias
from stages.models.t5.config import T5Config


def build_t5_mlp(config: T5Config) -> nn.Module:
    if config.feed_forward == "gated-gelu":
        return GatedMLP(config.hidden_size, config.ff_size, activation="gelu_new", dropout=config.dropout)
    return MLP(config.hidden_size, config.ff_size, activation="relu", bias=False,
               dropout=config.dropout, inner_dropout=config.dropout)


def _attention_kwargs(config: T5Config) -> dict:
    return dict(head_size=config.head_size, bias=False, dropout=config.dropout, scale=1.0)


class T5EncoderBlock(nn.Module):
    def __init__(self, config: T5Config):
        super().__init__()
        C = config.hidden_size
        self.attn_norm = RMSNorm(C, eps=config.layer_norm_eps)
        self.attn = SelfAttention(C, config.num_heads, **_attention_kwargs(config))
        self.mlp_norm = RMSNorm(C, eps=config.layer_norm_eps)
        self.mlp = build_t5_mlp(config)

    def forward(self, x: torch.Tensor, attn_bias: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.attn_norm(x), attn_bias)  # (B, S, C)
        x = x + self.mlp(self.mlp_norm(x))  # (B, S, C)
        return x


class T5DecoderBlock(nn.Module):
    def __init__(self, config: T5Config):
        super().__init__()
        C = config.hidden_size
        self.self_attn_norm = RMSNorm(C, eps=config.layer_norm_eps)
        self.self_attn = SelfAttention(C, config.num_heads, **_attention_kwargs(config))
        self.cross_attn_norm = RMSNorm(C, eps=config.layer_norm_eps)
        self.cross_attn = CrossAttention(C, config.num_heads, **_attention_kwargs(config))
        self.mlp_norm = RMSNorm(C, eps=config.layer_norm_eps)
        self.mlp = build_t5_mlp(config)

    def forward(self, x: torch.Tensor, self_attn_bias: torch.Tensor, memory: torch.Tensor,
                memory_mask: torch.Tensor | None,
                kv_cache: tuple[KVCache, KVCache] | None = None) -> torch.Tensor:
        self_cache, cross_cache = (None, None) if kv_cache is None else kv_cache
        x = x + self.self_attn(self.self_attn_norm(x), self_attn_bias, kv_cache=self_cache)  # (B, T, C)
        x = x + self.cross_attn(self.cross_attn_norm(x), memory, memory_mask, kv_cache=cross_cache)  # (B, T, C)
        x = x + self.mlp(self.mlp_norm(x))  # (B, T, C)
        return x


class T5Encoder(nn.Module):
    def __init__(self, config: T5Config):
        super().__init__()
        self.position_bias = RelativePositionBias(
            config.num_heads, bidirectional=True, num_buckets=config.relative_attention_num_buckets,
            max_distance=config.relative_attention_max_distance,
        )
        self.blocks = nn.ModuleList([T5EncoderBlock(config) for _ in range(config.num_layers)])
        self.final_norm = RMSNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
        """Embedded source (B, S, C) -> encoder output (B, S, C)."""
        S = x.size(1)
        bias = self.position_bias(S, S)  # (1, nh, S, S), shared by all blocks
        if attention_mask is not None:
            bias = bias + additive_mask(padding_mask(attention_mask), bias.dtype)  # (B, nh, S, S)
        x = self.dropout(x)
        for block in self.blocks:
            x = block(x, bias)  # (B, S, C)
        return self.dropout(self.final_norm(x))


class T5Decoder(nn.Module):
    def __init__(self, config: T5Config):
        super().__init__()
        self.position_bias = RelativePositionBias(
            config.num_heads, bidirectional=False, num_buckets=config.relative_attention_num_buckets,
            max_distance=config.relative_attention_max_distance,
        )
        self.blocks = nn.ModuleList([T5DecoderBlock(config) for _ in range(config.num_decoder_layers)])
        self.final_norm = RMSNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor, memory: torch.Tensor, memory_attention_mask: torch.Tensor | None,
                kv_cache: list[tuple[KVCache, KVCache]] | None = None) -> torch.Tensor:
        """Embedded target (B, T, C) and encoder output (B, S, C) -> (B, T, C)."""
        T = x.size(1)
        past = 0 if kv_cache is None else kv_cache[0][0].length
        bias = self.position_bias(T, past + T, past=past)  # (1, nh, T, past+T)
        # The causal bucket function gives later keys bucket 0; the mask hides them.
        bias = bias + additive_mask(causal_mask(T, past + T, x.device), bias.dtype)
        memory_mask = None
        if memory_attention_mask is not None:
            memory_mask = additive_mask(padding_mask(memory_attention_mask), x.dtype)  # (B, 1, 1, S)
        x = self.dropout(x)
        for i, block in enumerate(self.blocks):
            x = block(x, bias, memory, memory_mask, None if kv_cache is None else kv_cache[i])  # (B, T, C)
        return self.dropout(self.final_norm(x))


class T5(nn.Module):
    """Encoder, decoder, shared token embedding and LM head (`T5ForConditionalGeneration`)."""

    def __init__(self, config: T5Config):
        super().__init__()
        self.config = config
        self.shared = nn.Embedding(config.vocab_size, config.hidden_size)
        self.encoder = T5Encoder(config)
        self.decoder = T5Decoder(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        if config.tie_word_embeddings:
            self.lm_head.weight = self.shared.weight
        self.apply(self._init_weights)

    def _init_weights(self, module: nn.Module) -> None:
        # Mesh TensorFlow's init (as in Hugging Face with initializer_factor 1): unit
        # variance for the embedding; std = fan_in**-0.5 for matrices, and queries also
        # absorb the 1/sqrt(hs) that the attention leaves out.
        C, F_, inner = self.config.hidden_size, self.config.ff_size, self.config.num_heads * self.config.head_size
        if module is self:
            nn.init.normal_(self.shared.weight, std=1.0)
            if not self.config.tie_word_embeddings:
                nn.init.normal_(self.lm_head.weight, std=C**-0.5)
        elif isinstance(module, RMSNorm):
            nn.init.ones_(module.weight)
        elif isinstance(module, (SelfAttention, CrossAttention)):
            q_std = (C * self.config.head_size) ** -0.5
            if isinstance(module, SelfAttention):
                nn.init.normal_(module.qkv_proj.weight, std=C**-0.5)
                nn.init.normal_(module.qkv_proj.weight[:inner], std=q_std)
            else:
                nn.init.normal_(module.q_proj.weight, std=q_std)
                nn.init.normal_(module.kv_proj.weight, std=C**-0.5)
            nn.init.normal_(module.out_proj.weight, std=inner**-0.5)
        elif isinstance(module, (MLP, GatedMLP)):
            for linear in (module.fc_in, getattr(module, "fc_gate", None)):
                if linear is not None:
                    nn.init.normal_(linear.weight, std=C**-0.5)
            nn.init.normal_(module.fc_out.weight, std=F_**-0.5)
        elif hasattr(module, "relative_attention_bias"):
            nn.init.normal_(module.relative_attention_bias.weight, std=C**-0.5)

    def encode(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Source ids (B, S) -> encoder output (B, S, C). attention_mask: 1 real, 0 pad."""
        return self.encoder(self.shared(input_ids), attention_mask)

    def decode(self, decoder_input_ids: torch.Tensor, memory: torch.Tensor,
               attention_mask: torch.Tensor | None = None,
               kv_cache: list[tuple[KVCache, KVCache]] | None = None) -> torch.Tensor:
        """Target ids (B, T), encoder output (B, S, C) and the source mask -> logits (B, T, V).
        With kv_cache (see `new_kv_cache`), decoder_input_ids follow the cached tokens."""
        x = self.decoder(self.shared(decoder_input_ids), memory, attention_mask, kv_cache)  # (B, T, C)
        if self.config.tie_word_embeddings:
            x = x * self.config.hidden_size**-0.5  # undo the unit-variance embedding's scale
        return self.lm_head(x)  # (B, T, V)

    def new_kv_cache(self) -> list[tuple[KVCache, KVCache]]:
        """Per decoder block: (self-attention cache, cross-attention cache of the encoder)."""
        return [(KVCache(), KVCache(static=True)) for _ in self.decoder.blocks]

    def shift_right(self, labels: torch.Tensor) -> torch.Tensor:
        """Teacher-forcing decoder inputs: start token, then labels[:-1] (-100 -> pad)."""
        start = torch.full_like(labels[:, :1], self.config.decoder_start_token_id)  # (B, 1)
        shifted = torch.cat([start, labels[:, :-1]], dim=1)  # (B, T)
        return shifted.masked_fill(shifted == IGNORE_INDEX, self.config.pad_token_id)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Returns (logits (B, T, V), loss or None). labels (B, T): target ids, -100 = no
        loss, not shifted (decoder_input_ids default to shift_right(labels))."""
        if decoder_input_ids is None:
            if labels is None:
                raise ValueError("T5.forward needs decoder_input_ids or labels")
            decoder_input_ids = self.shift_right(labels)
        memory = self.encode(input_ids, attention_mask)  # (B, S, C)
        logits = self.decode(decoder_input_ids, memory, attention_mask)  # (B, T, V)
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(), ignore_index=IGNORE_INDEX)
        return logits, loss

    def num_parameters(self) -> int:
        """Unique parameters (a tied LM head counted once)."""
        return sum(p.numel() for p in self.parameters())

    def flops_per_example(self, source_len: int, target_len: int) -> int:
        """Training FLOPs (forward + backward) for one source/target pair:

            6 * (N_enc * S + N_dec * T + N_head * T)
            + 12 * inner * (L_enc * S * S + L_dec * T * T + L_dec * T * S)

        Each weight does 6 FLOPs per token it processes (GPT's 6N); encoder weights see S
        source tokens, decoder weights and the LM head T target tokens. The second line is
        attention's QK^T and AV (4 * inner FLOPs per query-key pair forward, times 3):
        encoder self, decoder self and cross attention, with inner = nh * hs. The
        embedding lookup and the bias tables cost nothing; a tied head counts once, as a
        matmul.
        """
        c = self.config
        n_enc = sum(p.numel() for n, p in self.encoder.named_parameters() if "position_bias" not in n)
        n_dec = sum(p.numel() for n, p in self.decoder.named_parameters() if "position_bias" not in n)
        n_head = self.lm_head.weight.numel()
        inner = c.num_heads * c.head_size
        S, T = source_len, target_len
        matmuls = 6 * (n_enc * S + (n_dec + n_head) * T)
        attention = 12 * inner * (c.num_layers * S * S + c.num_decoder_layers * (T * T + T * S))
        return matmuls + attention

    def flops_per_token(self, seq_len: int) -> int:
        """flops_per_example(seq_len, seq_len) per (source + target) token."""
        return self.flops_per_example(seq_len, seq_len) // (2 * seq_len)
