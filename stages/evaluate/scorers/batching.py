"""Batches of rows of similar length, and right padding.

Longest rows first (as lm-eval): a batch's first row sets its padded length, and an
out-of-memory error shows at once rather than at the end of a long evaluation.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


def length_batches(lengths: Sequence[int], batch_size: int) -> list[list[int]]:
    """Indices into `lengths`, longest first, in batches of at most batch_size."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    return [order[i:i + batch_size] for i in range(0, len(order), batch_size)]


def pad_right(rows: Sequence[Sequence[int]], pad_id: int, device: str | torch.device
              ) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids (B, T), attention mask (B, T): 1 real, 0 padding), padded on the right."""
    width = max(len(row) for row in rows)
    ids = [list(row) + [pad_id] * (width - len(row)) for row in rows]
    mask = [[1] * len(row) + [0] * (width - len(row)) for row in rows]
    return (torch.tensor(ids, dtype=torch.long, device=device),
            torch.tensor(mask, dtype=torch.long, device=device))
