"""T5 span corruption (t5): documents as token streams cut into chunks of T5's raw length,
each corrupted into inputs + targets (writer.py); the loader adds the decoder's inputs
(batch.py); the decoder writes the dropped spans behind their sentinels (loss.py)."""

from __future__ import annotations

import numpy as np

from stages.data.span_corruption import random_spans_helper
from stages.objectives.base import PretrainingObjective, special_entries
from stages.objectives.span.writer import SpanWriter


class SpanObjective(PretrainingObjective):
    name = "span"
    model_family = "t5"

    def index_entries(self, config, ids):
        raw_length, targets_length = random_spans_helper(
            config.seq_len, config.span.noise_density, config.span.mean_noise_span_length)
        return {"special": special_entries(ids), "span": {
            **config.span.model_dump(mode="json"), "raw_length": raw_length,
            "targets_length": targets_length, "sentinel_ids": list(ids.sentinels)}}

    def writer(self, spec, path, max_rows, rng):
        return SpanWriter(spec, path, max_rows, rng)

    def split_stats(self, batches, seq_len, pad_id, sentinels):
        sentinel_ids = np.array(sentinels, dtype=np.int64)
        examples = spans = noise_tokens = 0
        for columns in batches:
            labels = columns["labels"].astype(np.int64)
            examples += len(labels)
            num_spans = int(np.isin(labels, sentinel_ids).sum())
            spans += num_spans
            noise_tokens += labels.size - num_spans - len(labels)  # minus sentinels and </s>
        examples = max(examples, 1)
        return {"padding_fraction": 0.0,
                "spans_per_example": round(spans / examples, 3),
                "noise_tokens_per_example": round(noise_tokens / examples, 3),
                "mean_span_length": round(noise_tokens / max(spans, 1), 3)}

    def batch_builder(self, index, seed):
        from stages.objectives.span.batch import SpanBatch
        return SpanBatch(index)

    def loss(self, index, index_path, span_boundary=False, variant=None):
        from stages.objectives.span.loss import SpanCorruption
        return SpanCorruption(index["seq_len"], index["span"]["targets_length"])

