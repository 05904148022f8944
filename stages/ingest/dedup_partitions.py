"""Step 2 of the distributed dedup: one task per hash partition finds the duplicates among
the documents whose route falls in its range, reading that range out of every staged
file (dedup_stage_file.py) with two binary searches on a memory map.

A document is (file, row); corpus order is the order of (file, row), so "first
occurrence" needs no global numbering.

Exact: per digest, every (file, row) after the first is dropped.
Near: per (band, key) bucket, an edge from each later document to the bucket's first
(lsh.py's rule; verified against the signatures in step 3, dedup_keep.py). Under
`minhash_clustering: pairs` a document is dropped when it is similar enough to the first
document of one of its buckets, whether or not that one is itself dropped, exactly as the
single-driver path decides, so no union-find over the pairs is needed; under
`components`, dedup_components.py joins the verified pairs into connected components
first. Documents that exact dedup drops take part as well: a copy
shares every bucket of its original, which comes earlier, so it is never a bucket's
first, and its own edges are ignored in step 3; the firsts are the same as over the
exact survivors alone.

Outputs, per partition p (sorted by (file, row), so the per-file task of step 3 reads its
slice with two binary searches):
    dedup/exact-drops-PPPPP.npy  (file, row) of every exact duplicate
    dedup/near-pairs-PPPPP.npy   (file, row, parent_file, parent_row), distinct
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from stages.ingest.dedup_stage_file import EXACT_ENTRY, NEAR_ENTRY, exact_path, near_path

DROP_ENTRY = np.dtype([("file", "<u4"), ("row", "<u4")])
PAIR_ENTRY = np.dtype([("file", "<u4"), ("row", "<u4"),
                       ("parent_file", "<u4"), ("parent_row", "<u4")])
ENTRIES_PER_PARTITION = 1 << 22  # ~100 MB of entries (24 bytes) sorted in one task


@dataclass(frozen=True)
class PartitionJob:
    index: int
    num_partitions: int
    dedup_dir: str  # holds files.json: the staging paths, in corpus order
    near: bool
    # The folder of the staged files and their entries, which the task reads: named so
    # that a task on another node of an object-store run fetches it (storage.node_transfer).
    staging_dir: str = ""


def partition_count(num_documents: int, num_bands: int | None, num_cpus: int) -> int:
    """Enough partitions that each sorts at most ENTRIES_PER_PARTITION entries (a task's
    memory stays bounded as the corpus grows), and at least one per CPU."""
    entries = num_documents * (num_bands or 1)
    return max(1, num_cpus, math.ceil(entries / ENTRIES_PER_PARTITION))


def write_file_list(dedup_dir: str, staging_paths: list[str]) -> None:
    """The staging paths, once on disk rather than in every job (files x partitions);
    relative to dedup_dir, so that a task that sees the folder elsewhere (another node's
    copy) finds the files beside it there."""
    os.makedirs(dedup_dir, exist_ok=True)
    with open(os.path.join(dedup_dir, "files.json"), "w", encoding="utf-8") as out:
        json.dump([os.path.relpath(path, dedup_dir) for path in staging_paths], out)


def read_file_list(dedup_dir: str) -> list[str]:
    with open(os.path.join(dedup_dir, "files.json"), encoding="utf-8") as file_list:
        return [os.path.normpath(os.path.join(dedup_dir, name)) for name in json.load(file_list)]


def exact_drops_path(dedup_dir: str, partition: int) -> str:
    return os.path.join(dedup_dir, f"exact-drops-{partition:05d}.npy")


def near_pairs_path(dedup_dir: str, partition: int) -> str:
    return os.path.join(dedup_dir, f"near-pairs-{partition:05d}.npy")


def find_duplicates(job: PartitionJob) -> tuple[int, int]:
    """Write this partition's exact drops and near candidate pairs; returns their counts."""
    paths = read_file_list(job.dedup_dir)
    drops = _exact_drops(_gather(paths, exact_path, EXACT_ENTRY, job))
    np.save(exact_drops_path(job.dedup_dir, job.index), drops)
    num_pairs = 0
    if job.near:
        pairs = _near_pairs(_gather(paths, near_path, NEAR_ENTRY, job))
        np.save(near_pairs_path(job.dedup_dir, job.index), pairs)
        num_pairs = len(pairs)
    return len(drops), num_pairs


def _gather(paths: list[str], entries_path: Callable[[str], str], dtype: np.dtype,
            job: PartitionJob) -> np.ndarray:
    """This partition's entries of every file, with a `file` field added."""
    low = (job.index << 64) // job.num_partitions
    high = ((job.index + 1) << 64) // job.num_partitions
    pieces = []
    for file_index, path in enumerate(paths):
        entries = np.load(entries_path(path), mmap_mode="r")
        if len(entries) == 0:
            continue
        routes = entries["route"]
        start = int(np.searchsorted(routes, np.uint64(low), side="left"))
        end = (len(entries) if high >> 64 else
               int(np.searchsorted(routes, np.uint64(high), side="left")))
        if start < end:
            piece = np.array(entries[start:end])
            pieces.append((file_index, piece))
    if not pieces:
        return _with_file(np.zeros(0, dtype=dtype), [])
    return _with_file(np.concatenate([p for _, p in pieces]),
                      [(file_index, len(p)) for file_index, p in pieces])


def _with_file(entries: np.ndarray, counts: list[tuple[int, int]]) -> np.ndarray:
    fields = [(name, entries.dtype[name]) for name in entries.dtype.names]
    out = np.empty(len(entries), dtype=fields + [("file", "<u4")])
    for name in entries.dtype.names:
        out[name] = entries[name]
    out["file"] = np.repeat([f for f, _ in counts], [n for _, n in counts]).astype(np.uint32)
    return out


def _exact_drops(entries: np.ndarray) -> np.ndarray:
    """(file, row) of every entry whose digest occurred at an earlier (file, row)."""
    order = np.lexsort((entries["row"], entries["file"], entries["low"], entries["route"]))
    ordered = entries[order]
    repeats = np.zeros(len(ordered), dtype=bool)
    repeats[1:] = ((ordered["route"][1:] == ordered["route"][:-1])
                   & (ordered["low"][1:] == ordered["low"][:-1]))
    return _sorted_by_file(ordered["file"][repeats], ordered["row"][repeats], DROP_ENTRY)


def _near_pairs(entries: np.ndarray) -> np.ndarray:
    """Per (band, key) bucket, (document, the bucket's first document) for every later
    document; distinct, sorted by document."""
    order = np.lexsort((entries["row"], entries["file"], entries["key"], entries["band"]))
    ordered = entries[order]
    opens = np.ones(len(ordered), dtype=bool)
    opens[1:] = ((ordered["band"][1:] != ordered["band"][:-1])
                 | (ordered["key"][1:] != ordered["key"][:-1]))
    first = np.flatnonzero(opens)[np.cumsum(opens) - 1]  # each position's bucket's first
    later = ~opens
    pairs = np.empty(int(later.sum()), dtype=PAIR_ENTRY)
    pairs["file"], pairs["row"] = ordered["file"][later], ordered["row"][later]
    pairs["parent_file"] = ordered["file"][first[later]]
    pairs["parent_row"] = ordered["row"][first[later]]
    return np.unique(pairs)  # sorts field by field: (file, row, parent_file, parent_row)


def _sorted_by_file(files: np.ndarray, rows: np.ndarray, dtype: np.dtype) -> np.ndarray:
    out = np.empty(len(files), dtype=dtype)
    out["file"], out["row"] = files, rows
    return np.sort(out, order=["file", "row"])


def file_slice(entries: np.ndarray, file_index: int) -> np.ndarray:
    """The entries of one file in a partition output sorted by file (a memory map: only
    the pages of the binary search and of the slice are read)."""
    files = entries["file"]
    start = int(np.searchsorted(files, file_index, side="left"))
    end = int(np.searchsorted(files, file_index, side="right"))
    return np.array(entries[start:end])
