"""clm batches: input_ids; document_ids (optional): per position, how many eos tokens
come before it in the row, so that attention can be kept within a document
(`document_attention_mask`). The model shifts labels itself."""

from __future__ import annotations

import numpy as np
import torch


class ClmBatch:
    def __init__(self, index: dict, document_ids: bool = False):
        self.eos_id = index["eos_id"]
        self.document_ids = document_ids

    def __call__(self, columns: dict[str, np.ndarray], example_ids: np.ndarray,
                 epoch: int) -> dict[str, torch.Tensor]:
        input_ids = columns["input_ids"].astype(np.int64)
        batch = {"input_ids": torch.from_numpy(input_ids)}
        if self.document_ids:
            ends = input_ids == self.eos_id
            starts = np.zeros_like(input_ids)
            starts[:, 1:] = np.cumsum(ends[:, :-1], axis=1)
            batch["document_ids"] = torch.from_numpy(starts)
        return batch


def document_attention_mask(document_ids: torch.Tensor) -> torch.Tensor:
    """(B, T) document ids -> (B, 1, T, T) bool, True where query i may attend to key j:
    same document and j <= i (causal)."""
    same = document_ids[:, :, None] == document_ids[:, None, :]
    seq_len = document_ids.shape[1]
    causal = torch.ones(seq_len, seq_len, dtype=torch.bool, device=document_ids.device).tril()
    return (same & causal)[:, None]
