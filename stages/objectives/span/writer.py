"""span examples: a shard split's documents as one token stream, each followed by eos,
cut into chunks of T5's raw length (random_spans_helper), each corrupted into inputs of
seq_len + targets; the unfinished last chunk is dropped, as clm does."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from stages.data.example_writer import ExampleWriter, column_field
from stages.data.span_corruption import corrupt, num_noise_spans, random_spans_noise_mask
from stages.objectives.base import WriterSpec
from stages.objectives.clm.writer import eos_joined


class SpanWriter:
    def __init__(self, spec: WriterSpec, path: str, max_rows: int | None,
                 rng: np.random.Generator):
        self.spec, self.rng = spec, rng
        settings = spec.entries["span"]
        self.noise_density, self.mean_span_length = settings["noise_density"], settings["mean_noise_span_length"]
        self.raw_length, self.targets_length = settings["raw_length"], settings["targets_length"]
        max_spans = num_noise_spans(self.raw_length, self.noise_density, self.mean_span_length)
        if len(spec.ids.sentinels) < max_spans:
            raise ValueError(
                f"span corruption of seq_len={spec.seq_len} needs "
                f"{max_spans} sentinel tokens <extra_id_0>.., the tokenizer has "
                f"{len(spec.ids.sentinels)}; use tokenizer.kind: unigram (T5 recipe) or lower "
                f"dataset.seq_len")
        self.sentinels = np.array(spec.ids.sentinels, dtype=np.int64)
        schema = pa.schema([column_field("input_ids", spec.dtype, spec.seq_len),
                            column_field("labels", spec.dtype, self.targets_length)])
        self._writer = ExampleWriter(path, schema, max_rows)
        self._pending = np.empty(0, dtype=np.int64)

    @property
    def full(self) -> bool:
        return self._writer.full

    def add(self, documents: list[list[int]]) -> int:
        stream = eos_joined(documents, self.spec.ids.eos)
        tokens = np.concatenate([self._pending, np.array(stream, dtype=np.int64)])
        num = len(tokens) // self.raw_length
        chunks = tokens[:num * self.raw_length].reshape(num, self.raw_length)
        self._pending = tokens[num * self.raw_length:]
        inputs = np.empty((num, self.spec.seq_len), dtype=np.int64)
        targets = np.empty((num, self.targets_length), dtype=np.int64)
        for row, chunk in enumerate(chunks):
            mask = random_spans_noise_mask(self.raw_length, self.noise_density, self.mean_span_length, self.rng)
            inputs[row], targets[row] = corrupt(chunk, mask, self.sentinels, self.spec.ids.eos)
        if num:
            self._writer.add({"input_ids": inputs, "labels": targets})
        return len(stream)

    def commit(self) -> int:
        return self._writer.commit()
