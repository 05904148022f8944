"""Ingest's output shards: one task per shard copies the kept rows out of the staging
files. Also the single-driver exact dedup (keep_masks, on digests in the driver), which
the distributed dedup (dedup_run.py) replaced in run.py and which the tests and
benchmarks/ingest_dedup_scale.py keep as the reference.

Shards are contiguous runs of the corpus order, cut so that each holds about the same
number of text bytes; the cut depends only on the documents, never on the parallelism.
Shard of a document = where its first byte falls in the kept corpus, in n equal parts.
plan_kept_shards plans this from per-file kept byte totals (the driver holds nothing per
document) and each writer picks its rows inside the files (KeptRowsPiece); plan_shards,
from per-document masks, gives the same shards byte for byte.
"""

from __future__ import annotations

import fnmatch
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from stages.ingest.dedup_stage_file import keep_path, sizes_path
from stages.ingest.staging import DIGEST_BYTES, DOCUMENT_SCHEMA, CleanedFile

# A digest as two 64-bit halves: numpy sorts this structured type field by field.
_DIGEST = np.dtype([("high", ">u8"), ("low", ">u8")])
assert _DIGEST.itemsize == DIGEST_BYTES
ROW_GROUP_ROWS = 8192  # documents per Parquet row group: readers stream one group at a time


@dataclass(frozen=True)
class ShardPiece:
    staging_path: str
    rows: np.ndarray  # row indices into that staging file, ascending

    def row_indices(self) -> np.ndarray:
        return self.rows


@dataclass(frozen=True)
class KeptRowsPiece:
    """The kept rows of one staging file that start in one shard, found by the writer from
    the file's keep mask and document sizes (dedup_stage_file.keep_path / sizes_path)."""

    staging_path: str
    keep_path: str
    sizes_path: str
    bytes_before: int  # kept bytes of the corpus before this file
    total_bytes: int   # kept bytes of the corpus
    num_shards: int
    shard: int

    def row_indices(self) -> np.ndarray:
        keep = np.load(self.keep_path)
        size = np.load(self.sizes_path)[keep]
        starts = self.bytes_before + np.cumsum(size) - size
        shard_of = _shard_of(starts, self.total_bytes, self.num_shards)
        return np.flatnonzero(keep)[shard_of == self.shard]


@dataclass(frozen=True)
class ShardJob:
    path: str
    pieces: tuple[ShardPiece | KeptRowsPiece, ...]


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
        starts = bytes_before + np.cumsum(size) - size
        shard_of = _shard_of(starts, total, num_shards)
        for shard in np.unique(shard_of):
            pieces[shard].append(ShardPiece(f.staging_path, kept_rows[shard_of == shard]))
        bytes_before += int(size.sum())
    return [ShardJob(os.path.join(documents_dir, shard_file_name(i)), tuple(p))
            for i, p in enumerate(pieces)]


def plan_kept_shards(staging_paths: list[str], kept_documents: list[int],
                     kept_bytes: list[int], num_shards: int,
                     documents_dir: str) -> list[ShardJob]:
    """plan_shards from per-file totals: a file goes to every shard that its kept byte range
    can start a document in; the writer takes the rows that do (maybe none)."""
    total = sum(kept_bytes)
    pieces: list[list[KeptRowsPiece]] = [[] for _ in range(num_shards)]
    bytes_before = 0
    for path, documents, num_bytes in zip(staging_paths, kept_documents, kept_bytes,
                                          strict=True):
        if documents:
            first, last = (int(s) for s in _shard_of(
                np.array([bytes_before, bytes_before + num_bytes]), total, num_shards))
            for shard in range(first, last + 1):
                pieces[shard].append(KeptRowsPiece(
                    path, keep_path(path), sizes_path(path), bytes_before, total,
                    num_shards, shard))
        bytes_before += num_bytes
    return [ShardJob(os.path.join(documents_dir, shard_file_name(i)), tuple(p))
            for i, p in enumerate(pieces)]


def _shard_of(starts: np.ndarray, total: int, num_shards: int) -> np.ndarray:
    return np.minimum(starts * num_shards // max(total, 1), num_shards - 1)


def shard_file_name(index: int) -> str:
    return f"part-{index:05d}.parquet"


def document_shards(ingest_dir: str | os.PathLike, manifest: dict | None = None) -> list[Path]:
    """The document shards of a finished ingest output, in corpus order: as its
    manifest lists them when given (an object-store run's driver holds none of them:
    the tasks that read a shard fetch it), else as the folder holds them."""
    if manifest is None:
        return sorted((Path(ingest_dir) / "documents").glob("part-*.parquet"))
    names = [entry["path"] for entry in manifest.get("files", [])]
    return sorted(Path(ingest_dir) / name for name in names
                  if fnmatch.fnmatchcase(name, "documents/part-*.parquet") and name.count("/") == 1)


def write_shard(job: ShardJob) -> int:
    """Write one shard under a temporary name, then rename: a file with the final name is
    always complete. Returns its number of rows."""
    partial = job.path + ".partial"
    rows = 0
    # Only `source` repeats; a dictionary for unique ids and texts would be wasted work.
    with pq.ParquetWriter(partial, DOCUMENT_SCHEMA, compression="zstd",
                          use_dictionary=["source"]) as writer:
        one_file: list[pa.Table] = []  # rows of one source file not yet written
        for piece in job.pieces:
            piece_rows = piece.row_indices()
            if len(piece_rows) == 0:  # a KeptRowsPiece whose file starts nothing here
                continue
            table = pq.read_table(piece.staging_path, schema=DOCUMENT_SCHEMA).take(piece_rows)
            if one_file and table["source"][0].as_py() != one_file[0]["source"][0].as_py():
                rows += _write_row_groups(writer, one_file, end_of_file=True)
            one_file.append(table)
            rows += _write_row_groups(writer, one_file, end_of_file=False)
        rows += _write_row_groups(writer, one_file, end_of_file=True)
    os.replace(partial, job.path)
    return rows


def _write_row_groups(writer: pq.ParquetWriter, one_file: list[pa.Table],
                      end_of_file: bool) -> int:
    """Write the full row groups of `one_file` (and, at its end, the rest): row groups
    start at a file's first row in the shard, so a file staged in pieces (split_plan.py)
    gives the same bytes as staged whole, and only a row group is held back."""
    if not one_file:
        return 0
    table = pa.concat_tables(one_file) if len(one_file) > 1 else one_file[0]
    done = table.num_rows if end_of_file else table.num_rows // ROW_GROUP_ROWS * ROW_GROUP_ROWS
    if done:
        writer.write_table(table.slice(0, done).combine_chunks(), row_group_size=ROW_GROUP_ROWS)
    one_file[:] = [table.slice(done)] if done < table.num_rows else []
    return done
