"""span batches: input_ids, attention_mask, labels (targets, </s> last),
decoder_input_ids (targets shifted right behind the start token, T5's pad)."""

from __future__ import annotations

import numpy as np
import torch


class SpanBatch:
    def __init__(self, index: dict):
        self.start_id = index["pad_id"]  # T5's decoder_start_token_id

    def __call__(self, columns: dict[str, np.ndarray], example_ids: np.ndarray,
                 epoch: int) -> dict[str, torch.Tensor]:
        input_ids = columns["input_ids"].astype(np.int64)
        labels = columns["labels"].astype(np.int64)
        decoder_input_ids = np.empty_like(labels)
        decoder_input_ids[:, 0] = self.start_id
        decoder_input_ids[:, 1:] = labels[:, :-1]
        return {"input_ids": torch.from_numpy(input_ids),
                "attention_mask": torch.ones_like(torch.from_numpy(input_ids)),
                "labels": torch.from_numpy(labels),
                "decoder_input_ids": torch.from_numpy(decoder_input_ids)}
