"""SpanBERT's span boundary objective (SBO, Joshi et al. 2020, section 3.2): predict every
token of a masked span from the two tokens just outside it and its position in the span,
not from its own (masked) hidden state.

    y_i = f(x_{s-1}, x_{e+1}, p_{i-s+1})          for each x_i of the span (s..e)
    h0 = [x_{s-1}; x_{e+1}; p_{i-s+1}]            (3C)   the paper's eq. 1
    h1 = LayerNorm(GeLU(W1 h0))                   (C)
    y  = LayerNorm(GeLU(W2 h1))                   (E)    decoded by the tied MLM decoder

x are the encoder's last hidden states; p a learned relative position embedding. The
second layer ends E = embedding_size wide so that the MLM decoder (the word embedding,
E wide under ALBERT's factorization, C for BERT) reads y; SpanBERT's code also gives the
SBO its own output bias, and so does `SpanBoundaryHead`.

Where the spans come from: the masked runs of the batch's labels (`labels != -100`),
not a span list carried next to the batch. Why: static datasets store only labels (their
spans are gone once written), token and whole-word masking have no spans at all, and the
loader, the placeholder batches and every test already pass labels; one rule then serves
static and dynamic masking alike. The price: two spans that touch (SpanBERT's sampler
keeps spans disjoint, not apart) read as one longer span, predicted from its outer
boundaries, and positions counted from its start. That is still a boundary prediction,
just a harder one, and it is what a reader of the stored labels could recover anyway.

A masked token is an SBO target when its run has a real token on both sides: a run at
position 0, at the row's last position, or next to padding (attention_mask 0) has no
boundary to read there and is left to the MLM part. A run longer than
`SBO_MAX_SPAN_TOKENS` tokens predicts its first SBO_MAX_SPAN_TOKENS tokens only (SpanBERT's
code truncates its pair targets the same way); SpanBERT's spans are at most 10 words, so
this only bites on words of more than ~3 pieces each.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn as nn

from stages.data.masking import IGNORE_INDEX
from stages.models.mlp import ACTIVATIONS

# Rows of the relative position table p: how far into a span SBO predicts. A module
# constant rather than a config key: the masking config lives in another stage, and 32
# tokens covers a 10-word span of 3.2 pieces per word (WordPiece averages ~1.3).
SBO_MAX_SPAN_TOKENS = 32


class SpanBoundaryTargets(NamedTuple):
    """The SBO targets of a batch, one entry per predicted token, row-major order."""
    rows: torch.Tensor       # (N,) batch row
    positions: torch.Tensor  # (N,) the masked token's position
    left: torch.Tensor       # (N,) s - 1: the token before its span
    right: torch.Tensor      # (N,) e + 1: the token after its span
    offsets: torch.Tensor    # (N,) i - s, 0-based (the paper's p_{i-s+1})
    tokens: torch.Tensor     # (N,) the original token: the target


def span_boundary_targets(labels: torch.Tensor, attention_mask: torch.Tensor | None = None,
                          max_span_tokens: int = SBO_MAX_SPAN_TOKENS) -> SpanBoundaryTargets:
    """Spans = maximal runs of labels != -100 in each row of labels (B, T); see the module
    docstring for which of their tokens become targets."""
    masked = labels != IGNORE_INDEX  # (B, T)
    seq_len = labels.size(1)
    positions = torch.arange(seq_len, device=labels.device).expand_as(labels)  # (B, T)
    before = torch.zeros_like(masked)
    before[:, 1:] = masked[:, :-1]
    after = torch.zeros_like(masked)
    after[:, :-1] = masked[:, 1:]
    # For each masked position, its run's first position (the latest run start at or
    # before it) and last position (the earliest run end at or after it).
    starts = torch.where(masked & ~before, positions, -1).cummax(dim=1).values
    ends = torch.where(masked & ~after, positions, seq_len)
    ends = ends.flip(1).cummin(dim=1).values.flip(1)
    left, right = starts - 1, ends + 1
    real = (torch.ones_like(masked) if attention_mask is None else attention_mask.bool())
    inside = (left >= 0) & (right < seq_len)
    left_real = real.gather(1, left.clamp(0, seq_len - 1))
    right_real = real.gather(1, right.clamp(0, seq_len - 1))
    keep = masked & inside & left_real & right_real & (positions - starts < max_span_tokens)
    rows, cols = keep.nonzero(as_tuple=True)
    return SpanBoundaryTargets(rows, cols, left[rows, cols], right[rows, cols],
                               cols - starts[rows, cols], labels[rows, cols])


class SpanBoundaryHead(nn.Module):
    """f of eq. 1 over the hidden states at each target's boundaries, plus the output
    bias; the caller decodes y with the tied MLM decoder."""

    def __init__(self, hidden_size: int, output_size: int, vocab_size: int, activation: str,
                 layer_norm_eps: float, max_span_tokens: int = SBO_MAX_SPAN_TOKENS):
        super().__init__()
        C, E = hidden_size, output_size
        self.position_embedding = nn.Embedding(max_span_tokens, C)
        self.activation = ACTIVATIONS[activation]
        self.fc1 = nn.Linear(3 * C, C)
        self.norm1 = nn.LayerNorm(C, eps=layer_norm_eps)
        self.fc2 = nn.Linear(C, E)
        self.norm2 = nn.LayerNorm(E, eps=layer_norm_eps)
        self.bias = nn.Parameter(torch.zeros(vocab_size))

    def forward(self, hidden: torch.Tensor, targets: SpanBoundaryTargets) -> torch.Tensor:
        """hidden (B, T, C) -> y (N, E), one per target (N may be 0)."""
        h0 = torch.cat([hidden[targets.rows, targets.left],
                        hidden[targets.rows, targets.right],
                        self.position_embedding(targets.offsets)], dim=-1)  # (N, 3C)
        h1 = self.norm1(self.activation(self.fc1(h0)))  # (N, C)
        return self.norm2(self.activation(self.fc2(h1)))  # (N, E)


class SpanBoundaryPredictions(NamedTuple):
    """What BertForPreTraining returns for SBO: logits (N, V) and their targets (N,)."""
    logits: torch.Tensor
    targets: torch.Tensor
