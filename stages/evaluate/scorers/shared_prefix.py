"""Rows that read a shared context once for several continuations (the choices of one
multiple-choice example), for a causal model.

    context  c0 c1 c2 | choice A: a0 a1 a2 | choice B: b0 b1
    row      c0 c1 c2  a0 a1  b0            (each branch is its continuation minus the last token)
    position  0  1  2   3  4   3            (every branch continues right after the context)
    sees     causal within the context; a branch sees the context and its own earlier tokens

The logits at c2 predict a0 and b0, at a0 predict a1, at a1 predict a2, at b0 predict b1:
exactly the logits of the separate rows c0 c1 c2 a0 a1 and c0 c1 c2 b0, with the
context computed once. With few-shot contexts of hundreds of tokens and four choices this
is most of the work saved; with one-token choices (A/B/C/D) the row is the context alone
(lm-eval's "one-token continuation" cache is that special case).

A row with no branches is an ordinary causal row: its mask is the causal mask.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch


@dataclass
class SharedPrefixRow:
    tokens: list[int] = field(default_factory=list)
    positions: list[int] = field(default_factory=list)  # position ids
    segments: list[int] = field(default_factory=list)  # 0: the context, i: the i-th branch

    @property
    def has_branches(self) -> bool:
        return bool(self.segments) and self.segments[-1] != 0


def causal_row(tokens: Sequence[int]) -> SharedPrefixRow:
    return SharedPrefixRow(list(tokens), list(range(len(tokens))), [0] * len(tokens))


def shared_prefix_row(context: Sequence[int], continuations: Sequence[Sequence[int]]
                      ) -> tuple[SharedPrefixRow, list[list[int]]]:
    """(row, for each continuation the row indices whose logits predict its tokens).
    context must be non-empty: its last token predicts every continuation's first."""
    assert context, "a shared prefix needs at least one token"
    row = causal_row(context)
    predictors = []
    for branch_number, continuation in enumerate(continuations, start=1):
        branch = list(continuation[:-1])
        start = len(row.tokens)
        row.tokens += branch
        row.positions += range(len(context), len(context) + len(branch))
        row.segments += [branch_number] * len(branch)
        predictors.append([len(context) - 1, *range(start, start + len(branch))])
    return row, predictors


def shared_prefix_mask(segments: torch.Tensor) -> torch.Tensor:
    """segments (B, T), -1 for padding -> (B, 1, T, T) bool, True where query i may see
    key j: j <= i, j is real, and j is in the context or in i's own branch. Every query
    sees itself, so that a padding query's softmax has a key (no NaN)."""
    T = segments.size(1)
    query, key = segments[:, :, None], segments[:, None, :]  # (B, T, 1), (B, 1, T)
    causal = torch.ones(T, T, dtype=torch.bool, device=segments.device).tril()  # (T, T)
    allowed = causal & (key >= 0) & ((key == 0) | (key == query))  # (B, T, T)
    allowed |= torch.eye(T, dtype=torch.bool, device=segments.device)
    return allowed[:, None]  # (B, 1, T, T), broadcast over heads
