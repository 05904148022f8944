"""Stored columns of a batch of examples -> the tensors a model takes, per objective.

A loader gathers rows (dict of numpy arrays) and calls its objective's `BatchBuilder`
with the rows' global example indices and the epoch, so that anything random here
(dynamic masking) is a function of (seed, epoch, example index) only: the same example
gets the same mask in an epoch whatever the rank, world size or resume point.

    clm   input_ids; document_ids (optional): per position, how many eos tokens come
          before it in the row, so that attention can be kept within a document
          (`document_attention_mask`). The model shifts labels itself.
    mlm   input_ids, token_type_ids, attention_mask, labels (-100 = not predicted),
          next_sentence_label (nsp/sop datasets); dynamic masks by token, whole word
          (masking.py) or SpanBERT span (span_masking.py), each example's from its own
          generator
    span  input_ids, attention_mask, labels (targets, </s> last), decoder_input_ids
          (targets shifted right behind the start token, T5's pad)
"""

from __future__ import annotations

import numpy as np
import torch

from stages.data.masking import IGNORE_INDEX, MaskingPolicy
from stages.data.span_masking import SpanMaskingPolicy


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


class MlmBatch:
    def __init__(self, index: dict, seed: int):
        settings, special = index["mlm"], index["special"]
        self.pad_id = index["pad_id"]
        self.seed = seed
        self.policy = None
        if settings["masking"] == "dynamic":
            # Words as the static path knows them: the tokenizer's continuation pieces
            # ('##...', or tokens without a word-start marker), stored in the index.
            # Indexes from before mask_unit existed have no key: token or whole word.
            span = settings.get("mask_unit") == "span"
            word_start = None
            if settings["whole_word_masking"] or span:
                word_start = np.ones(index["vocab_size"], dtype=bool)
                word_start[settings["continuation_ids"]] = False
            if span:
                self.policy = SpanMaskingPolicy(
                    mask_id=special["mask_id"], special_ids=np.array(special["special_ids"]),
                    vocab_size=index["vocab_size"], word_start=word_start,
                    mask_prob=settings["mask_prob"], mask_token_prob=settings["mask_token_prob"],
                    random_token_prob=settings["random_token_prob"],
                    geometric_p=settings["span_geometric_p"],
                    max_span_words=settings["max_span_words"])
            else:
                self.policy = MaskingPolicy(
                    mask_id=special["mask_id"], special_ids=np.array(special["special_ids"]),
                    vocab_size=index["vocab_size"], mask_prob=settings["mask_prob"],
                    mask_token_prob=settings["mask_token_prob"],
                    random_token_prob=settings["random_token_prob"], word_start=word_start)

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


def build_batch_builder(index: dict, seed: int, document_ids: bool = False):
    objective = index.get("objective", "clm")
    if objective == "mlm":
        return MlmBatch(index, seed)
    if objective == "span":
        return SpanBatch(index)
    return ClmBatch(index, document_ids)
