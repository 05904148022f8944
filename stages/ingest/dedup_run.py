"""The distributed dedup of ingest (steps 2 and 3 of run.py), as a hash-partitioned shuffle
of tasks, datatrove's MinHash stages in shape:

1. the per-file clean tasks write digests and band keys sorted by route
   (dedup_stage_file.py);
2. one task per partition finds exact duplicates and near-duplicate candidate pairs in
   its hash range (dedup_partitions.py);
3. one task per file builds its keep mask, verifying the candidates against the MinHash
   signatures, and returns its totals (dedup_keep.py); the shard writers read the masks
   (sharding.plan_kept_shards). With `minhash_clustering: components`, two rounds come
   first: per file, the verified pairs; then one task, the connected components
   (dedup_components.py), whose drops the keep masks read.

The driver holds per-file and per-partition metadata only, never anything per document:
its memory grows with the number of files and partitions, not of documents (and the
partition count only by one per ENTRIES_PER_PARTITION band entries). Tasks run on Ray when
it is up (map_tasks), in this process otherwise. The documents kept are those of the
single-driver path (sharding.keep_masks + lsh.near_duplicate_masks), first occurrence
in corpus order, under either clustering; tests/unit/test_dedup_distributed.py checks
both agree.
"""

from __future__ import annotations

import os

from stages.ingest.config import IngestConfig
from stages.ingest.dedup_components import write_component_drops
from stages.ingest.dedup_keep import FileKept, KeepJob, build_keep_mask, write_verified_pairs
from stages.ingest.dedup_partitions import (
    PartitionJob,
    find_duplicates,
    partition_count,
    write_file_list,
)
from stages.ingest.dedup_stage_file import StagedFile
from stages.ray_tasks import map_tasks, ray_is_up


def deduplicate(staged: list[StagedFile], staging_paths: list[str], config: IngestConfig,
                dedup_dir: str, num_partitions: int | None = None, transfer=None) -> list[FileKept]:
    """Write every staged file's keep mask; per file, its totals. `num_partitions`: by
    default from the document count and the cluster's CPUs (partition_count). `transfer`: the
    stage's StageContext.node_transfer (stages.ray_tasks.map_tasks)."""
    write_file_list(dedup_dir, staging_paths)
    staging_dir = os.path.dirname(dedup_dir)  # the staged files and their entries, beside it
    if num_partitions is None:
        num_partitions = partition_count(
            sum(s.num_documents for s in staged),
            config.minhash_bands if config.dedup == "near" else None, _cluster_cpus())
    if config.dedup != "none":
        jobs = [PartitionJob(p, num_partitions, dedup_dir, config.dedup == "near", staging_dir)
                for p in range(num_partitions)]
        map_tasks(find_duplicates, jobs, desc="ingest: dedup partitions", transfer=transfer)
    keep_jobs = [KeepJob(i, config.dedup, config.minhash_threshold, num_partitions, dedup_dir,
                         config.minhash_clustering, staging_dir) for i in range(len(staged))]
    if config.dedup == "near" and config.minhash_clustering == "components":
        map_tasks(write_verified_pairs, keep_jobs, desc="ingest: verified pairs", transfer=transfer)
        map_tasks(write_component_drops, [dedup_dir], desc="ingest: near-duplicate components", transfer=transfer)
    return map_tasks(build_keep_mask, keep_jobs, desc="ingest: keep masks", transfer=transfer)


def _cluster_cpus() -> int:
    if not ray_is_up():
        return 1
    import ray

    return max(1, int(ray.cluster_resources().get("CPU", 1)))

