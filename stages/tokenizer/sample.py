"""The tokenizer's training text: a seeded, uniform sample of documents, streamed.

Each document gets u = unit_hash(id, seed). The top HELDOUT_FRACTION of u is never
trained on; it measures fertility. The rest is sampled at the rate that makes the
expected sample `sample_bytes` (or `sample_documents`, whichever is smaller), and the
stream stops at exactly that budget. Documents are read with pyarrow's iter_batches, one
record batch at a time: memory stays flat.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from stages.data.hashing import unit_hash

HELDOUT_FRACTION = 0.01
HELDOUT_MAX_BYTES = 1_000_000
_BATCH_ROWS = 1024
_SALT = "tokenizer-sample"


class TrainingSample:
    """Iterate for batches of training texts; afterwards `bytes_used` and `heldout` are set.
    `corpus_bytes` is the size of the text it samples from."""

    def __init__(self, shards: list[Path], sample_bytes: int, seed: int,
                 sample_documents: int | None = None):
        self.shards = shards
        self.sample_bytes = sample_bytes
        self.sample_documents = sample_documents
        self.seed = seed
        self.bytes_used = 0
        self.documents_used = 0
        self.heldout: list[str] = []
        self._heldout_bytes = 0
        pool_bytes, pool_documents = corpus_size(shards)
        self.corpus_bytes = pool_bytes  # what the sample was drawn from (for the stage metrics)
        rate = min(1.0, sample_bytes / max(pool_bytes * (1 - HELDOUT_FRACTION), 1))
        if sample_documents is not None:
            rate = min(rate, sample_documents / max(pool_documents * (1 - HELDOUT_FRACTION), 1))
        self._threshold = (1 - HELDOUT_FRACTION) * rate

    def __iter__(self) -> Iterator[list[str]]:
        for shard in self.shards:
            # use_threads=False: Arrow's reader threads (and their allocator arenas) cost
            # ~30 MB of RSS here and gain nothing; the trainer is the bottleneck.
            batches = pq.ParquetFile(shard).iter_batches(_BATCH_ROWS, columns=["id", "text"],
                                                         use_threads=False)
            for batch in batches:
                chosen, finished = self._take(batch)
                if chosen:
                    yield chosen
                if finished:
                    return

    def _take(self, batch: pa.RecordBatch) -> tuple[list[str], bool]:
        """The batch's training texts (and held-out texts, into self.heldout), in order,
        and whether the budget ran out. Only the texts taken become Python strings: with a
        10% sample, converting every text cost as much CPU as a third of the training."""
        u = np.fromiter((unit_hash(doc_id, self.seed, _SALT)
                         for doc_id in batch.column("id").to_pylist()), float, batch.num_rows)
        sizes = pc.binary_length(batch.column("text")).to_numpy()
        picks = np.flatnonzero(u < self._threshold)
        # A document fits while the running totals stay within both budgets.
        over = self.bytes_used + np.cumsum(sizes[picks]) > self.sample_bytes
        if self.sample_documents is not None:
            over |= self.documents_used + np.arange(1, len(picks) + 1) > self.sample_documents
        cut = int(np.argmax(over)) if over.any() else len(picks)
        end = picks[cut] if cut < len(picks) else batch.num_rows  # nothing after the cut
        held = np.flatnonzero(u[:end] >= 1 - HELDOUT_FRACTION)
        # Held-out documents are added while the held-out total is under its cap.
        held = held[self._heldout_bytes + np.cumsum(sizes[held]) - sizes[held] < HELDOUT_MAX_BYTES]
        texts = batch.column("text")
        self.heldout += texts.take(held).to_pylist()
        self._heldout_bytes += int(sizes[held].sum())
        picks = picks[:cut]
        self.bytes_used += int(sizes[picks].sum())
        self.documents_used += len(picks)
        return texts.take(picks).to_pylist(), cut < len(over)


def corpus_size(shards: list[Path]) -> tuple[int, int]:
    """(text bytes, documents) from Parquet metadata, without reading any data. The bytes
    are the `text` column's uncompressed size, ~1-2% above the UTF-8 size (it counts
    offsets too); they only set a sampling rate."""
    total_bytes = total_documents = 0
    for shard in shards:
        metadata = pq.ParquetFile(shard).metadata
        column = metadata.schema.names.index("text")
        total_bytes += sum(metadata.row_group(g).column(column).total_uncompressed_size
                           for g in range(metadata.num_row_groups))
        total_documents += metadata.num_rows
    return total_bytes, total_documents
