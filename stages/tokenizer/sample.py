"""The tokenizer's training text: a seeded, uniform sample of documents, streamed.

Each document gets u = unit_hash(id, seed). The top HELDOUT_FRACTION of u is never
trained on; it measures fertility. The rest is sampled at the rate that makes the
expected sample `sample_bytes`, and the stream stops at exactly that budget. Documents
are read with pyarrow's iter_batches, one record batch at a time: memory stays flat.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq

from stages.data.hashing import unit_hash

HELDOUT_FRACTION = 0.01
HELDOUT_MAX_BYTES = 1_000_000
_BATCH_ROWS = 1024
_SALT = "tokenizer-sample"


class TrainingSample:
    """Iterate for batches of training texts; afterwards `bytes_used` and `heldout` are set."""

    def __init__(self, shards: list[Path], sample_bytes: int, seed: int):
        self.shards = shards
        self.sample_bytes = sample_bytes
        self.seed = seed
        self.bytes_used = 0
        self.heldout: list[str] = []
        self._heldout_bytes = 0
        pool_bytes = text_bytes_upper_bound(shards) * (1 - HELDOUT_FRACTION)
        self._threshold = (1 - HELDOUT_FRACTION) * min(1.0, sample_bytes / max(pool_bytes, 1))

    def __iter__(self) -> Iterator[list[str]]:
        for shard in self.shards:
            for batch in pq.ParquetFile(shard).iter_batches(_BATCH_ROWS, columns=["id", "text"]):
                texts = batch.column("text").to_pylist()
                sizes = pc.binary_length(batch.column("text")).to_pylist()
                chosen = []
                for doc_id, text, size in zip(batch.column("id").to_pylist(), texts, sizes,
                                           strict=True):
                    u = unit_hash(doc_id, self.seed, _SALT)
                    if u >= 1 - HELDOUT_FRACTION:
                        if self._heldout_bytes < HELDOUT_MAX_BYTES:
                            self.heldout.append(text)
                            self._heldout_bytes += size
                    elif u < self._threshold:
                        if self.bytes_used + size > self.sample_bytes:
                            if chosen:
                                yield chosen
                            return
                        chosen.append(text)
                        self.bytes_used += size
                if chosen:
                    yield chosen


def text_bytes_upper_bound(shards: list[Path]) -> int:
    """Uncompressed size of the `text` column from Parquet metadata, without reading any
    data: ~1-2% above the UTF-8 size (it counts offsets too); it only sets a sampling rate."""
    total = 0
    for shard in shards:
        metadata = pq.ParquetFile(shard).metadata
        column = metadata.schema.names.index("text")
        total += sum(metadata.row_group(g).column(column).total_uncompressed_size
                     for g in range(metadata.num_row_groups))
    return total
