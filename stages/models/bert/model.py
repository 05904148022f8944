"""BERT in plain PyTorch (Devlin et al. 2019), weight-compatible with Hugging Face
`BertForPreTraining` (see `convert.py`).

Post-LayerNorm encoder blocks (`x = norm(x + attn(x))`), learned absolute positions plus
token-type (segment) embeddings, bidirectional attention with a padding mask, exact
(erf) GELU, a tanh pooler over [CLS], and the two pre-training heads: masked-LM
(dense -> GELU -> LayerNorm -> decoder tied to the word embedding, plus a bias) and
next-sentence / sentence-order prediction (2 classes from the pooled [CLS]).

    config = BertConfig(vocab_size=30522, num_layers=2, hidden_size=128, num_heads=2)
    model = BertForPreTraining(config)
    mlm_logits, nsp_logits = model(input_ids, attention_mask, token_type_ids)  # the losses: stages/objectives/mlm
    hidden = model.backbone.hidden_states(input_ids, attention_mask)   # (B, T, C)

variant "albert" (Lan et al. 2020) is the same encoder with ALBERT's two parameter savings,
weight-compatible with Hugging Face `AlbertForPreTraining` (see `convert_albert.py`):

- factorized embeddings: the word, position and token-type tables are E =
  `embedding_size` wide (128), projected to C by `embedding_projection` (ALBERT's
  `embedding_hidden_mapping_in`); the MLM head maps C back to E and decodes with the
  tied E-wide word embedding. V x E + E x C instead of V x C.
- cross-layer sharing (`share_layers`): "all" applies one block num_layers times
  (ALBERT's default); "attention" / "ffn" share only that sublayer (the paper's
  ablations). Shared modules sit at every index of `blocks`, so the state dict names
  each layer (blocks.0 ... blocks.L-1, the same tensors) and the forward pass reads like
  BERT's.

It also uses tanh GELU ("gelu_new", ALBERT v2's) and the pair head for sentence-order
prediction (the same `nsp` layer; the dataset decides what the label means).

    albert = BertForPreTraining(BertConfig(vocab_size=30000, variant="albert",
                                           hidden_size=768, num_heads=12, num_layers=12))

`span_boundary_objective=True` adds SpanBERT's span boundary objective (Joshi et al. 2020;
`span_boundary.py`): a head `sbo` that predicts each masked token from the hidden states
just outside its span and its position in the span, decoded by the tied MLM decoder.
Pass `span_boundary_labels` (the MLM labels, whose masked runs are the spans) to get its
predictions as a third output (the masked-LM objective scores them). Off, the
model is exactly BERT's (same parameters, same initialisation, same outputs). Hugging
Face has no SBO head: export writes the rest and leaves `sbo.*` out (hf_export.py).

variant "electra" (Clark et al. 2020) is the encoder of ELECTRA's discriminator and generator
(`electra.py` pairs them; `convert_electra.py` converts to Hugging Face `ElectraModel`): BERT's
post-LN blocks and exact GELU, embeddings E = `embedding_size` wide (unset: hidden_size)
projected to C only when E != C (Hugging Face's `embeddings_project`), and no pooler
(`ElectraModel` has none; `forward` returns None for it and classifiers bring their own
dense layer, `heads.ElectraForSequenceClassification`). `generator_size` and `rtd_weight`
shape the pretraining model around it (`generator_shape`, `electra.py`).

Shapes: B batch, T sequence length, C hidden size, E embedding size, V vocabulary size,
N SBO targets in the batch.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from stages.models.attention import SelfAttention, padding_mask
from stages.models.bert.config import BertConfig
from stages.models.bert.parts import PARTS
from stages.models.mlp import ACTIVATIONS, MLP
from stages.models.bert.span_boundary import (
    SpanBoundaryHead, SpanBoundaryPredictions, span_boundary_targets,
)


class BertEmbeddings(nn.Module):
    """word + position + token type, then LayerNorm and dropout; E = embedding_size wide
    (hidden_size for BERT)."""

    def __init__(self, config: BertConfig):
        super().__init__()
        E = config.embedding_size
        self.word_embedding = nn.Embedding(config.vocab_size, E, padding_idx=config.pad_token_id)
        self.position_embedding = nn.Embedding(config.max_seq_len, E)
        self.token_type_embedding = nn.Embedding(config.type_vocab_size, E)
        self.norm = nn.LayerNorm(E, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None) -> torch.Tensor:
        T = input_ids.size(1)
        positions = torch.arange(T, device=input_ids.device)  # (T,)
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)  # every token in segment A
        x = (
            self.word_embedding(input_ids)
            + self.position_embedding(positions)
            + self.token_type_embedding(token_type_ids)
        )  # (B, T, E)
        return self.dropout(self.norm(x))


class BertBlock(nn.Module):
    """Post-LN residual block: transform, add back, normalise."""

    def __init__(self, config: BertConfig):
        super().__init__()
        C = config.hidden_size
        self.attn = SelfAttention(C, config.num_heads, dropout=config.dropout)
        self.attn_norm = nn.LayerNorm(C, eps=config.layer_norm_eps)
        self.mlp = MLP(C, config.intermediate_size, activation=config.hidden_act, dropout=config.dropout)
        self.mlp_norm = nn.LayerNorm(C, eps=config.layer_norm_eps)

    def forward(self, x: torch.Tensor, attn_mask: torch.Tensor | None) -> torch.Tensor:
        x = self.attn_norm(x + self.attn(x, attn_mask))  # (B, T, C)
        x = self.mlp_norm(x + self.mlp(x))  # (B, T, C)
        return x


class Bert(nn.Module):
    """The encoder (Hugging Face `BertModel`): embeddings, blocks and the [CLS] pooler."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.config = config
        parts = PARTS[config.variant]  # the variant's embedding projection and pooler (parts.py)
        self.embeddings = BertEmbeddings(config)
        self.embedding_projection = parts.embedding_projection(config)
        self.blocks = nn.ModuleList(build_blocks(config))
        self.pooler = parts.pooler(config)
        self.apply(init_bert_weights)

    def hidden_states(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                      token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        """Last-layer hidden states, (B, T, C). attention_mask (B, T): 1 real, 0 padding;
        padding keys are hidden from every query. token_type_ids (B, T): segment ids."""
        T = input_ids.size(1)
        if T > self.config.max_seq_len:
            raise ValueError(
                f"sequence length {T} exceeds max_seq_len={self.config.max_seq_len}; "
                "truncate the inputs (BERT's position table is fixed)"
            )
        x = self.embeddings(input_ids, token_type_ids)  # (B, T, E)
        if self.embedding_projection is not None:
            x = self.embedding_projection(x)  # (B, T, C)
        attn_mask = None if attention_mask is None else padding_mask(attention_mask)  # (B, 1, 1, T)
        for block in self.blocks:
            x = block(x, attn_mask)  # (B, T, C)
        return x

    def pool(self, hidden: torch.Tensor) -> torch.Tensor:
        """tanh(W h_[CLS] + b), (B, C): the sentence summary NSP and classifiers read."""
        return torch.tanh(self.pooler(hidden[:, 0]))

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Returns (hidden states (B, T, C), pooled [CLS] (B, C); None without a pooler: electra)."""
        hidden = self.hidden_states(input_ids, attention_mask, token_type_ids)
        return hidden, None if self.pooler is None else self.pool(hidden)

    def num_parameters(self, exclude_position_embedding: bool = False) -> int:
        """Unique parameters: a block shared across layers counts once."""
        n = sum(p.numel() for p in self.parameters())
        if exclude_position_embedding:
            n -= self.embeddings.position_embedding.weight.numel()
            n -= self.embeddings.token_type_embedding.weight.numel()
        return n

    def reused_block_parameters(self) -> int:
        """Parameters applied again by layers that share them (0 without sharing): compute
        follows the layers, not the unique weights, so FLOPs count these too."""
        applied = sum(sum(p.numel() for p in block.parameters()) for block in self.blocks)
        return applied - sum(p.numel() for p in self.blocks.parameters())

    def flops_per_token(self, seq_len: int | None = None) -> int:
        """Training FLOPs per token of the encoder, 6 * N + 12 * L * C * T (see
        `GPT.flops_per_token`): attention is bidirectional, so every query reads all T
        keys, as GPT's estimate also assumes. N excludes the position and token-type
        tables (lookups) and the word embedding (a lookup here; the MLM decoder that
        reuses it is counted by `BertForPreTraining.flops_per_token`)."""
        seq_len = self.config.max_seq_len if seq_len is None else seq_len
        n = self.num_parameters(exclude_position_embedding=True) - self.embeddings.word_embedding.weight.numel()
        n += self.reused_block_parameters()
        return 6 * n + 12 * self.config.num_layers * self.config.hidden_size * seq_len


class BertForPreTraining(nn.Module):
    """BERT with the masked-LM and next-sentence heads (Hugging Face `BertForPreTraining`;
    `AlbertForPreTraining` for variant albert, whose pair head predicts sentence order)."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.config = config
        C, E = config.hidden_size, config.embedding_size
        self.backbone = Bert(config)
        self.mlm_activation = ACTIVATIONS[config.hidden_act]
        self.mlm_transform = nn.Linear(C, E)
        self.mlm_norm = nn.LayerNorm(E, eps=config.layer_norm_eps)
        self.mlm_decoder = nn.Linear(E, config.vocab_size, bias=False)
        self.mlm_decoder.weight = self.backbone.embeddings.word_embedding.weight  # tied
        self.mlm_bias = nn.Parameter(torch.zeros(config.vocab_size))
        self.nsp = nn.Linear(C, 2)  # is-next (0) / random (1), or sentence order
        for module in (self.mlm_transform, self.mlm_norm, self.nsp):
            init_bert_weights(module)
        self.sbo = None  # created last, so that BERT's own weights draw the same numbers
        if config.span_boundary_objective:
            self.sbo = SpanBoundaryHead(C, E, config.vocab_size, config.hidden_act, config.layer_norm_eps)
            self.sbo.apply(init_bert_weights)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        span_boundary_labels: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, ...]:
        """Returns (MLM logits (B, T, V), NSP logits (B, 2)), and with span_boundary_labels
        a third: SpanBoundaryPredictions (logits (N, V), targets (N,)).

        span_boundary_labels (B, T): the MLM labels (original token at masked positions,
        -100 elsewhere), whose masked runs are the spans the SBO head predicts (needs
        config.span_boundary_objective). The losses are the masked-LM objective's
        (stages/objectives/mlm/loss.py), the one place they are computed.
        """
        hidden, pooled = self.backbone(input_ids, attention_mask, token_type_ids)  # (B, T, C), (B, C)
        mlm_logits = self.mlm_logits(hidden)  # (B, T, V)
        nsp_logits = self.nsp(pooled)  # (B, 2)
        if span_boundary_labels is None:
            return mlm_logits, nsp_logits
        if self.sbo is None:
            raise ValueError("span_boundary_labels needs the SBO head: build the model with "
                             "BertConfig(span_boundary_objective=True) (pretrain.model."
                             "span_boundary_objective: true)")
        return mlm_logits, nsp_logits, self.span_boundary_predictions(hidden, span_boundary_labels, attention_mask)

    def span_boundary_predictions(self, hidden: torch.Tensor, labels: torch.Tensor,
                                  attention_mask: torch.Tensor | None) -> SpanBoundaryPredictions:
        """The SBO head on hidden states (B, T, C) for the spans of labels (B, T)."""
        targets = span_boundary_targets(labels, attention_mask)
        logits = self.mlm_decoder(self.sbo(hidden, targets))  # (N, V)
        return SpanBoundaryPredictions(logits + self.sbo.bias.to(logits.dtype), targets.tokens)

    def mlm_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """The masked-LM head on hidden states (..., C) -> logits (..., V)."""
        x = self.mlm_norm(self.mlm_activation(self.mlm_transform(hidden)))  # (..., E)
        logits = self.mlm_decoder(x)  # (..., V)
        # In the logits' dtype: under bf16 autocast an fp32 bias would promote all B*T*V
        # logits to fp32 (twice the memory traffic here and in backward).
        return logits + self.mlm_bias.to(logits.dtype)

    def num_parameters(self, exclude_position_embedding: bool = False) -> int:
        """Unique parameters (the tied decoder counted once)."""
        n = sum(p.numel() for p in self.parameters())
        if exclude_position_embedding:
            emb = self.backbone.embeddings
            n -= emb.position_embedding.weight.numel() + emb.token_type_embedding.weight.numel()
        return n

    def flops_per_token(self, seq_len: int | None = None) -> int:
        """6 * N + 12 * L * C * T with N every parameter but the position and token-type
        tables: the word embedding counts once, for the MLM decoder matmul. Like GPT's
        estimate, the MLM head is counted at every position although training only
        needs the masked ones."""
        seq_len = self.config.max_seq_len if seq_len is None else seq_len
        n = self.num_parameters(exclude_position_embedding=True) + self.backbone.reused_block_parameters()
        return 6 * n + 12 * self.config.num_layers * self.config.hidden_size * seq_len


def build_blocks(config: BertConfig) -> list[BertBlock]:
    """num_layers blocks; under cross-layer sharing the later ones reuse the first block's
    modules (all of it, its attention or its feed-forward sublayer)."""
    if config.share_layers == "all":
        return [BertBlock(config)] * config.num_layers
    blocks = [BertBlock(config) for _ in range(config.num_layers)]
    for block in blocks[1:]:
        for name in SHARED_SUBLAYERS[config.share_layers]:
            setattr(block, name, getattr(blocks[0], name))
    return blocks


# The modules of BertBlock that the later layers take from the first, per share_layers
# ("all" shares the whole block: build_blocks repeats it).
SHARED_SUBLAYERS = {"none": (), "attention": ("attn", "attn_norm"), "ffn": ("mlp", "mlp_norm")}


def init_bert_weights(module: nn.Module) -> None:
    """BERT init: N(0, 0.02) for weights and embeddings, zero biases, unit LayerNorms."""
    if isinstance(module, nn.Linear):
        nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if module.bias is not None:
            nn.init.zeros_(module.bias)
    elif isinstance(module, nn.Embedding):
        nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if module.padding_idx is not None:
            with torch.no_grad():
                module.weight[module.padding_idx].zero_()
    elif isinstance(module, nn.LayerNorm):
        nn.init.ones_(module.weight)
        nn.init.zeros_(module.bias)
