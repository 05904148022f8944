"""The dedup as ingest did it before issue 19, in the driver (sharding.keep_masks,
lsh.near_duplicate_masks, sharding.plan_shards), next to the distributed one
(dedup_run.deduplicate, sharding.plan_kept_shards), on the same staged files: for the
tests that pin the kept documents and shard bytes of the one to the other."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np

from stages.ingest.config import IngestConfig
from stages.ingest.dedup_run import deduplicate
from stages.ingest.dedup_stage_file import keep_path, stage_file
from stages.ingest.lsh import near_duplicate_masks
from stages.ingest.sharding import keep_masks, plan_kept_shards, plan_shards, write_shard
from stages.ingest.sources import resolve_sources
from stages.ingest.staging import CleanJob, clean_file


def clean_jobs(config: IngestConfig, data_dir: Path, staging_dir: Path) -> list[CleanJob]:
    staging_dir.mkdir(parents=True)
    return [CleanJob(file, str(staging_dir / f"file-{i:06d}.parquet"), config)
            for i, file in enumerate(resolve_sources(config.sources, data_dir))]


def single_driver(config: IngestConfig, data_dir: Path, work: Path) -> tuple[list, list[bytes]]:
    """(keep masks, shard bytes) of the single-driver path."""
    jobs = clean_jobs(config, data_dir, work / "staging")
    cleaned = [clean_file(job) for job in jobs]
    masks = keep_masks(cleaned, dedup=config.dedup != "none")
    if config.dedup == "near":
        masks = near_duplicate_masks(cleaned, masks, config.minhash_bands,
                                     config.minhash_threshold, config.minhash_clustering)
    return masks, _write(plan_shards(cleaned, masks, config.num_shards, str(work / "documents")))


def distributed(config: IngestConfig, data_dir: Path, work: Path,
                num_partitions: int | None) -> tuple[list, list[bytes], list]:
    """(keep masks, shard bytes, per-file totals) of the distributed path."""
    jobs = clean_jobs(config, data_dir, work / "staging")
    staged = [stage_file(job) for job in jobs]
    paths = [job.staging_path for job in jobs]
    kept = deduplicate(staged, paths, config, str(work / "staging" / "dedup"), num_partitions)
    masks = [np.load(keep_path(path)) for path in paths]
    shards = _write(plan_kept_shards(paths, [k.documents_out for k in kept],
                                     [k.bytes_out for k in kept], config.num_shards,
                                     str(work / "documents")))
    return masks, shards, kept


def _write(shard_jobs) -> list[bytes]:
    Path(shard_jobs[0].path).parent.mkdir(parents=True, exist_ok=True)
    for job in shard_jobs:
        write_shard(job)
    out = [Path(job.path).read_bytes() for job in shard_jobs]
    shutil.rmtree(Path(shard_jobs[0].path).parent)
    return out
