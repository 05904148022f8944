"""Statistics of a built split, read back from its finished shards (memory-mapped, one
record batch at a time), so that shards kept from an interrupted build count too. What
is counted is the objective's (`PretrainingObjective.split_stats`)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

from stages.data.packed import column_arrays
from stages.objectives.registry import objective_named


@dataclass(frozen=True)
class StatsJob:
    """One split's statistics, read back from its shards wherever they are (a task in an
    object-store run: the driver holds no shard)."""
    output_dir: Path
    shard_files: tuple[Path, ...]  # absolute: what a task on another node fetches
    objective: str
    seq_len: int
    pad_id: int | None
    sentinels: tuple[int, ...]


def split_stats_of(job: StatsJob) -> dict:
    shards = [{"path": path.relative_to(job.output_dir).as_posix()} for path in job.shard_files]
    return split_stats(job.output_dir, shards, job.objective, job.seq_len, job.pad_id, job.sentinels)


def split_stats(output_dir: Path, shards: list[dict], objective: str, seq_len: int,
                pad_id: int | None, sentinels: tuple[int, ...]) -> dict:
    """mlm: padding, masked fraction (static) and pair-label balance; span: spans and
    noise per example; clm: nothing beyond the index (its shards are not read)."""
    return objective_named(objective).split_stats(_record_batches(output_dir, shards), seq_len, pad_id, sentinels)


def _record_batches(output_dir: Path, shards: list[dict]) -> Iterator[dict[str, np.ndarray]]:
    for shard in shards:
        with pa.memory_map(str(output_dir / shard["path"])) as source:
            reader = pa.ipc.open_file(source)
            for i in range(reader.num_record_batches):
                yield column_arrays(reader.get_batch(i))
