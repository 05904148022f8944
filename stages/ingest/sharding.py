"""Steps 2 and 3 of ingest: exact dedup over the whole corpus (in the driver, on digests
only; near dedup is lsh.py), then one task per output shard that copies the kept rows out
of the staging files.

Shards are contiguous runs of the corpus order, cut so that each holds about the same
number of text bytes; the cut depends only on the documents, never on the parallelism.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from stages.ingest.staging import DIGEST_BYTES, DOCUMENT_SCHEMA, CleanedFile

# A digest as two 64-bit halves: numpy sorts this structured type field by field.
_DIGEST = np.dtype([("high", ">u8"), ("low", ">u8")])
assert _DIGEST.itemsize == DIGEST_BYTES
ROW_GROUP_ROWS = 8192  # documents per Parquet row group: readers stream one group at a time


@dataclass(frozen=True)
class ShardPiece:
    staging_path: str
    rows: np.ndarray  # row indices into that staging file, ascending


@dataclass(frozen=True)
class ShardJob:
    path: str
    pieces: tuple[ShardPiece, ...]


def keep_masks(files: list[CleanedFile], dedup: bool) -> list[np.ndarray]:
    """Per file, which documents to keep: the first occurrence of each text in corpus order.
    One sort of the 16-byte digests (16 bytes per document in memory, not a Python set)."""
    if not files:
        return []
    counts = [f.num_documents for f in files]
    keep = np.ones(sum(counts), dtype=bool)
    if dedup and len(keep):
        digests = np.frombuffer(b"".join(f.digests for f in files), dtype=_DIGEST)
        _, first = np.unique(digests, return_index=True)  # return_index: first occurrences
        keep[:] = False
        keep[first] = True
    return np.split(keep, np.cumsum(counts)[:-1])


def plan_shards(files: list[CleanedFile], masks: list[np.ndarray], num_shards: int,
                documents_dir: str) -> list[ShardJob]:
    """Cut the kept documents (in corpus order) into `num_shards` byte-balanced runs."""
    sizes = [f.text_bytes[mask] for f, mask in zip(files, masks, strict=True)]
    total = int(sum(s.sum() for s in sizes))
    pieces: list[list[ShardPiece]] = [[] for _ in range(num_shards)]
    bytes_before = 0
    for f, mask, size in zip(files, masks, sizes, strict=True):
        kept_rows = np.flatnonzero(mask)
        # Shard of a document = where its first byte falls in the corpus, in n equal parts.
        starts = bytes_before + np.cumsum(size) - size
        shard_of = np.minimum(starts * num_shards // max(total, 1), num_shards - 1)
        for shard in np.unique(shard_of):
            pieces[shard].append(ShardPiece(f.staging_path, kept_rows[shard_of == shard]))
        bytes_before += int(size.sum())
    return [ShardJob(os.path.join(documents_dir, shard_file_name(i)), tuple(p))
            for i, p in enumerate(pieces)]


def shard_file_name(index: int) -> str:
    return f"part-{index:05d}.parquet"


def document_shards(ingest_dir: str | os.PathLike) -> list[Path]:
    """The document shards of a finished ingest output, in corpus order."""
    return sorted((Path(ingest_dir) / "documents").glob("part-*.parquet"))


def write_shard(job: ShardJob) -> int:
    """Write one shard under a temporary name, then rename: a file with the final name is
    always complete. Returns its number of rows."""
    partial = job.path + ".partial"
    rows = 0
    # Only `source` repeats; a dictionary for unique ids and texts would be wasted work.
    with pq.ParquetWriter(partial, DOCUMENT_SCHEMA, compression="zstd",
                          use_dictionary=["source"]) as writer:
        for piece in job.pieces:
            table = pq.read_table(piece.staging_path, schema=DOCUMENT_SCHEMA).take(piece.rows)
            writer.write_table(table, row_group_size=ROW_GROUP_ROWS)
            rows += table.num_rows
    os.replace(partial, job.path)
    return rows
