"""The masking policy of an mlm dataset, from its index.json entries: the writer (static
masking) and the loader (dynamic masking) both build it here, so they mask alike."""

from __future__ import annotations

from typing import Any

import numpy as np

from stages.data.masking import MaskingPolicy
from stages.data.span_masking import SpanMaskingPolicy


def masking_policy(entries: dict[str, Any], vocab_size: int) -> MaskingPolicy | SpanMaskingPolicy:
    """entries: the dataset's "mlm" and "special" entries (MlmObjective.index_entries)."""
    settings, special = entries["mlm"], entries["special"]
    special_ids = np.array(special["special_ids"], dtype=np.int64)
    # Indexes from before mask_unit existed have no key: token or whole word.
    span = settings.get("mask_unit") == "span"
    word_start = None
    if settings["whole_word_masking"] or span:
        # Words as the tokenizer splits them: its continuation pieces ('##...', or tokens
        # without a word-start marker) do not start one.
        word_start = np.ones(vocab_size, dtype=bool)
        word_start[settings["continuation_ids"]] = False
    if span:
        return SpanMaskingPolicy(
            mask_id=special["mask_id"], special_ids=special_ids, vocab_size=vocab_size, word_start=word_start,
            mask_prob=settings["mask_prob"], mask_token_prob=settings["mask_token_prob"],
            random_token_prob=settings["random_token_prob"], geometric_p=settings["span_geometric_p"],
            max_span_words=settings["max_span_words"])
    return MaskingPolicy(
        mask_id=special["mask_id"], special_ids=special_ids, vocab_size=vocab_size,
        mask_prob=settings["mask_prob"], mask_token_prob=settings["mask_token_prob"],
        random_token_prob=settings["random_token_prob"], word_start=word_start)
