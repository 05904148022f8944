"""Step 3 of the distributed dedup, one task per staged file: its keep mask from the
partition outputs (dedup_partitions.py), near candidates verified against the MinHash
signatures, written to staging (.keep.npy) for the shard writers; the driver gets only
this file's totals (FileKept).

Verification is lsh.py's: a document is a near-duplicate when its signature agrees with
its candidate parent's on at least `threshold` of the permutations. Only exact survivors
are checked (lsh.py never sees the others); parents are read from their own files'
signatures through memory maps, one file at a time.

With `minhash_clustering: pairs` (the default), a document is dropped only for an
earlier document it is itself similar to: with pairs 7~5 and 7~3 (5 and 3 share no
bucket), this keeps 3 and 5, so chains of partial overlaps do not merge documents that are
not near each other. With `components`, datatrove's clustering step decides instead (one
document kept per connected component: 3 alone); dedup_components.py finds the components
and this task reads the drops it wrote.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from stages.ingest.dedup_components import component_drops_path, verified_pairs_path
from stages.ingest.dedup_partitions import (
    exact_drops_path,
    file_slice,
    near_pairs_path,
    read_file_list,
)
from stages.ingest.dedup_stage_file import keep_path, sizes_path

_VERIFY_PAIRS = 65_536  # pairs verified per step: 64 Ki x 2 x 128 x 4 B = 64 MB at most


@dataclass(frozen=True)
class KeepJob:
    file_index: int
    dedup: str  # "exact" | "near" | "none"
    threshold: float
    num_partitions: int
    dedup_dir: str
    clustering: str = "pairs"  # IngestConfig.minhash_clustering
    staging_dir: str = ""  # what the task reads (PartitionJob.staging_dir)


@dataclass(frozen=True)
class FileKept:
    """One file's outcome: what the metrics and the shard plan need, nothing per document."""

    documents_out: int
    bytes_out: int
    exact_duplicate: tuple[int, int]  # (documents, UTF-8 bytes) dropped as exact copies
    near_duplicate: tuple[int, int]
    histogram: dict[int, int] = field(default_factory=dict)  # power of two -> kept documents


def build_keep_mask(job: KeepJob) -> FileKept:
    paths = read_file_list(job.dedup_dir)
    staging_path = paths[job.file_index]
    sizes = np.load(sizes_path(staging_path))
    exact = _exact_survivors(job, len(sizes))
    keep = exact.copy()
    if job.dedup == "near" and job.clustering == "components":
        drops = np.load(component_drops_path(job.dedup_dir), mmap_mode="r")
        keep[file_slice(drops, job.file_index)["row"]] = False
    elif job.dedup == "near":
        keep[np.unique(verified_pairs(job, paths, exact)["row"]).astype(np.int64)] = False
    np.save(keep_path(staging_path), keep)
    near = exact & ~keep
    kept_sizes = sizes[keep]
    bins = np.maximum(6, np.ceil(np.log2(np.maximum(kept_sizes, 1))).astype(int))
    powers, counts = np.unique(bins, return_counts=True)
    return FileKept(int(keep.sum()), int(kept_sizes.sum()),
                    (int((~exact).sum()), int(sizes[~exact].sum())),
                    (int(near.sum()), int(sizes[near].sum())),
                    dict(zip(powers.tolist(), counts.tolist(), strict=True)))


def write_verified_pairs(job: KeepJob) -> int:
    """Step a of the components clustering (dedup_components.py): this file's verified
    pairs, written for the components task; returns how many."""
    paths = read_file_list(job.dedup_dir)
    exact = _exact_survivors(job, len(np.load(sizes_path(paths[job.file_index]), mmap_mode="r")))
    pairs = verified_pairs(job, paths, exact)
    np.save(verified_pairs_path(job.dedup_dir, job.file_index), pairs)
    return len(pairs)


def _exact_survivors(job: KeepJob, num_documents: int) -> np.ndarray:
    keep = np.ones(num_documents, dtype=bool)
    if job.dedup != "none":
        for partition in range(job.num_partitions):
            drops = np.load(exact_drops_path(job.dedup_dir, partition), mmap_mode="r")
            keep[file_slice(drops, job.file_index)["row"]] = False
    return keep


def verified_pairs(job: KeepJob, paths: list[str], exact: np.ndarray) -> np.ndarray:
    """This file's candidate pairs (PAIR_ENTRY) whose document is an exact survivor and
    whose signatures agree on at least `threshold` of the permutations; distinct, sorted."""
    pieces = [file_slice(np.load(near_pairs_path(job.dedup_dir, p), mmap_mode="r"),
                         job.file_index) for p in range(job.num_partitions)]
    pairs = np.unique(np.concatenate(pieces))  # a pair found in several bands: once
    pairs = pairs[exact[pairs["row"]]]
    if len(pairs) == 0:
        return pairs
    own = np.load(_signatures_path(paths[job.file_index]), mmap_mode="r")
    verified = []
    for start in range(0, len(pairs), _VERIFY_PAIRS):
        chunk = pairs[start:start + _VERIFY_PAIRS]
        parents = _parent_signatures(paths, chunk)
        agreement = (np.asarray(own[chunk["row"]]) == parents).mean(axis=1)
        verified.append(chunk[agreement >= job.threshold])
    return np.concatenate(verified)


def _parent_signatures(paths: list[str], pairs: np.ndarray) -> np.ndarray:
    out = None
    for file_index in np.unique(pairs["parent_file"]).tolist():
        selected = np.flatnonzero(pairs["parent_file"] == file_index)
        signatures = np.load(_signatures_path(paths[file_index]), mmap_mode="r")
        rows = signatures[pairs["parent_row"][selected]]
        if out is None:
            out = np.empty((len(pairs), rows.shape[1]), dtype=rows.dtype)
        out[selected] = rows
    return out


def _signatures_path(staging_path: str) -> str:
    return staging_path + ".minhash.npy"  # CleanJob.signatures_path
