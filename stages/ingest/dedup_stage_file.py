"""Step 1 of the distributed dedup, inside each per-file task: clean the file (staging.py),
then leave everything the dedup needs in staging next to it, so that only per-file
metadata travels back to the driver.

Per staged file `file-NNNNNN.parquet`, next to it:
    .sizes.npy  int64 UTF-8 size of each staged document (shard planning, metrics)
    .exact.npy  one entry per document (route, low, row): its 16-byte digest as two 64-bit
                halves, the high half doubling as the route (blake2b: uniform), sorted by
                route, so a partition task reads its hash range with two binary searches
    .near.npy   (near dedup) one entry per document and LSH band (route, key, band, row),
                route a mix of (band, key), sorted by route

The route is what hash-partitions the shuffle: partition p of P owns the routes in
[p * 2^64 / P, (p + 1) * 2^64 / P). P is chosen after this step, from the document count
(dedup_partitions.partition_count), because the files are written sorted, not split.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from stages.ingest.staging import CleanedFile, CleanJob, clean_file

EXACT_ENTRY = np.dtype([("route", "<u8"), ("low", "<u8"), ("row", "<u4")])
NEAR_ENTRY = np.dtype([("route", "<u8"), ("key", "<u8"), ("band", "<u4"), ("row", "<u4")])
_DIGEST_HALVES = np.dtype([("high", ">u8"), ("low", ">u8")])


def sizes_path(staging_path: str) -> str:
    return staging_path + ".sizes.npy"


def exact_path(staging_path: str) -> str:
    return staging_path + ".exact.npy"


def near_path(staging_path: str) -> str:
    return staging_path + ".near.npy"


def keep_path(staging_path: str) -> str:
    """Written by dedup_keep.build_keep_mask: bool, one per staged document."""
    return staging_path + ".keep.npy"


@dataclass(frozen=True)
class StagedFile:
    """What the driver holds per file: the clean task's counters, with the per-document
    fields (digests, text_bytes) left empty; they stay in staging (.exact / .sizes)."""

    summary: CleanedFile
    num_documents: int


def stage_file(job: CleanJob) -> StagedFile:
    cleaned = clean_file(job)
    np.save(sizes_path(job.staging_path), cleaned.text_bytes)
    if job.config.dedup != "none":
        np.save(exact_path(job.staging_path), exact_entries(cleaned.digests))
    if job.config.dedup == "near":
        np.save(near_path(job.staging_path), near_entries(np.load(job.bands_path)))
    summary = dataclasses.replace(cleaned, digests=b"", text_bytes=np.zeros(0, np.int64))
    return StagedFile(summary, cleaned.num_documents)


def exact_entries(digests: bytes) -> np.ndarray:
    halves = np.frombuffer(digests, dtype=_DIGEST_HALVES)
    entries = np.empty(len(halves), dtype=EXACT_ENTRY)
    entries["route"], entries["low"] = halves["high"], halves["low"]
    entries["row"] = np.arange(len(halves), dtype=np.uint32)
    return entries[np.argsort(entries["route"], kind="stable")]


def near_entries(band_major_keys: np.ndarray) -> np.ndarray:
    """(bands, documents) uint64 band keys -> entries sorted by route."""
    num_bands, num_documents = band_major_keys.shape
    entries = np.empty(num_bands * num_documents, dtype=NEAR_ENTRY)
    entries["key"] = band_major_keys.reshape(-1)
    entries["band"] = np.repeat(np.arange(num_bands, dtype=np.uint32), num_documents)
    entries["row"] = np.tile(np.arange(num_documents, dtype=np.uint32), num_bands)
    entries["route"] = _mix(entries["key"] ^ (entries["band"].astype(np.uint64)
                                               * np.uint64(0x9E3779B97F4A7C15)))
    return entries[np.argsort(entries["route"], kind="stable")]


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer: band keys are sums of products, their bits not uniform
    enough to cut hash ranges on directly."""
    x = x.astype(np.uint64)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))
