"""mlm batches: input_ids, token_type_ids, attention_mask, labels (-100 = not predicted),
next_sentence_label (nsp/sop datasets). Static masks are stored; dynamic ones are drawn
here by token, whole word or SpanBERT span (masking.py), each example's from its own
generator seeded by (seed, epoch, example index): the same example gets the same mask in
an epoch whatever the rank, world size or resume point."""

from __future__ import annotations

import numpy as np
import torch

from stages.data.masking import IGNORE_INDEX
from stages.objectives.mlm.masking import masking_policy


class MlmBatch:
    def __init__(self, index: dict, seed: int):
        self.pad_id = index["pad_id"]
        self.seed = seed
        self.policy = None
        if index["mlm"]["masking"] == "dynamic":
            self.policy = masking_policy(index, index["vocab_size"])

    def __call__(self, columns: dict[str, np.ndarray], example_ids: np.ndarray,
                 epoch: int) -> dict[str, torch.Tensor]:
        input_ids = columns["input_ids"].astype(np.int64)
        seq_len = input_ids.shape[1]
        if self.policy is None:  # static: stored
            labels = columns["labels"].astype(np.int64)
            labels[labels == self.pad_id] = IGNORE_INDEX
        else:
            input_ids, labels = self.policy.mask_examples(
                input_ids, [np.random.default_rng([self.seed, epoch, int(example)])
                            for example in example_ids])
        attention_mask = np.arange(seq_len)[None, :] < columns["num_tokens"][:, None]
        batch = {"input_ids": torch.from_numpy(input_ids),
                 "token_type_ids": torch.from_numpy(columns["token_type_ids"].astype(np.int64)),
                 "attention_mask": torch.from_numpy(attention_mask.astype(np.int64)),
                 "labels": torch.from_numpy(labels)}
        if "next_sentence_label" in columns:
            batch["next_sentence_label"] = torch.from_numpy(
                columns["next_sentence_label"].astype(np.int64))
        return batch
