"""Batches of training examples: memory-mapped, sharded by rank, seeded shuffle per
epoch, exact resume. torch + pyarrow (+ numpy, fsspec for remote paths) only: no Ray,
no DeepSpeed, no engine, so a training worker or a notebook can use it as is.

Order: epoch e visits every example of the split once, in the permutation fixed by
(seed, e). Global batch g is perm[g*W*B:(g+1)*W*B] for world size W and batch size B;
rank r takes the r-th slice of B examples. The position is one number, `samples_consumed`
(global, examples of this epoch handed to all ranks together), so a run can resume with a
different world size or batch size: no example is skipped or repeated within the epoch.

Why a global permutation and not shard order plus a shuffle buffer: the examples are
memory-mapped and fixed-size, so any row is one page read away; a permutation of N
int64s costs 8 bytes per example (80 MB for 10M examples, made in well under a second),
mixes the whole split rather than a buffer's width, and makes the resume position a
single integer that does not depend on the world size. A shuffle buffer's state depends
on the ranks reading it and could not resume on another world size exactly.

Objectives: the stored columns become model inputs in the batch builder the caller hands
the loader (`stages.objectives`: the objective's, for the dataset's index; dynamic masking
is drawn there from (seed, epoch, example index), so resume stays exact). The caller picks
it, so that this layer knows no objective.

Damage: a shard that does not parse, or whose row count or token ids disagree with
index.json, raises DamagedShardError naming the file when the loader is built, before
any training step (token ids: `stages.data.token_range`).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import torch

from stages.data.packed import (
    REBUILD_HINT,
    INDEX_FILE,
    DamagedShardError,
    column_arrays,
    open_shard,
    read_batches,
    read_index,
)
from storage.dataset_cache import local_dataset_dir
from stages.data.token_range import check_token_ids, should_check

# (stored columns, global example indices, epoch) -> a batch
BatchBuilder = Callable[[dict[str, np.ndarray], np.ndarray, int], Any]
# (the dataset's index.json, the loader's seed) -> its batch builder
BatchBuilderFactory = Callable[[dict, int], BatchBuilder]


class ExampleLoader:
    """Iterates forever (epoch after epoch); each item is what `batch_builder(index,
    seed)` makes of a batch's stored columns: for an objective's builder
    (`stages.objectives.registry.build_batch_builder`) a dict of tensors whose keys depend
    on the objective, each (batch_size, ...).

    shuffle=False reads examples in storage order (evaluation). drop_last=False keeps the
    epoch's last, partial global batch: a rank then gets fewer examples, possibly none,
    so that every rank still takes the same number of steps. `dataset_dir` may be an
    fsspec URL (s3://, gs://, memory://, file://); its files are copied once to
    `cache_dir` and memory-mapped from there.
    """

    def __init__(self, dataset_dir: str | os.PathLike, split: str, batch_size: int,
                 rank: int = 0, world_size: int = 1, seed: int = 0, shuffle: bool = True,
                 drop_last: bool = True, *, batch_builder: BatchBuilderFactory,
                 cache_dir: str | os.PathLike | None = None):
        if not 0 <= rank < world_size:
            raise ValueError(f"rank={rank} must be in [0, world_size={world_size})")
        if batch_size < 1:
            raise ValueError(f"batch_size={batch_size} must be at least 1")
        local_dir = local_dataset_dir(dataset_dir, split, cache_dir, index_file=INDEX_FILE)
        self.index = read_index(local_dir)
        if split not in self.index["splits"]:
            raise ValueError(f"split {split!r} is not in {dataset_dir}; it has "
                             f"{', '.join(self.index['splits'])}")
        self.split = split
        self.seq_len: int = self.index["seq_len"]
        self.batch_size = batch_size
        self.rank = rank
        self.world_size = world_size
        self.seed = seed
        self.shuffle = shuffle
        self.drop_last = drop_last
        self._build_batch = batch_builder(self.index, seed)

        self._blocks, self._empty = _map_shards(local_dir, self.index["splits"][split]["shards"],
                                                self.index["vocab_size"], rank, world_size)
        sizes = [len(block["input_ids"]) for block in self._blocks]
        self._block_starts = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        self.num_rows = int(self._block_starts[-1])
        if self.num_rows < self._global_batch and drop_last:
            raise ValueError(
                f"split {split!r} has {self.num_rows} rows, fewer than one global batch "
                f"(world_size {world_size} x batch_size {batch_size}); lower batch_size, "
                f"use drop_last=False, or build a bigger dataset")

        self.epoch = 0
        self.samples_consumed = 0
        self._permutation_epoch = -1
        self._permutation = np.empty(0, dtype=np.int64)

    @property
    def _global_batch(self) -> int:
        return self.world_size * self.batch_size

    def __len__(self) -> int:
        """Batches per epoch for each rank (the same for every rank)."""
        rounding = math.floor if self.drop_last else math.ceil
        return rounding(self.num_rows / self._global_batch)

    def __iter__(self):
        return self

    def __next__(self):
        epoch, rows = self._next_rows()
        return self._build_batch(self._gather(rows), rows, epoch)

    def _next_rows(self) -> tuple[int, np.ndarray]:
        remaining = self.num_rows - self.samples_consumed
        if remaining <= 0 or (self.drop_last and remaining < self._global_batch):
            self.epoch += 1
            self.samples_consumed = 0
        start = self.samples_consumed + self.rank * self.batch_size
        stop = min(start + self.batch_size, self.num_rows)
        rows = self._epoch_permutation()[start:stop]
        self.samples_consumed = min(self.samples_consumed + self._global_batch, self.num_rows)
        return self.epoch, rows

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "samples_consumed": self.samples_consumed, "seed": self.seed}

    def load_state_dict(self, state: dict) -> None:
        if state["seed"] != self.seed:
            raise ValueError(
                f"the saved loader state was made with seed {state['seed']}, this loader has "
                f"seed {self.seed}: resuming would change the order; use the same seed")
        if not 0 <= state["samples_consumed"] <= self.num_rows:
            raise ValueError(
                f"the saved loader state has consumed {state['samples_consumed']} samples but "
                f"split {self.split!r} has {self.num_rows} rows: is it the same dataset?")
        self.epoch = state["epoch"]
        self.samples_consumed = state["samples_consumed"]

    def _epoch_permutation(self) -> np.ndarray:
        if self._permutation_epoch != self.epoch:
            if self.shuffle:
                generator = np.random.default_rng([self.seed, self.epoch])
                self._permutation = generator.permutation(self.num_rows)
            else:
                self._permutation = np.arange(self.num_rows)
            self._permutation_epoch = self.epoch
        return self._permutation

    def _gather(self, rows: np.ndarray) -> dict[str, np.ndarray]:
        """Copy the given global rows out of the memory-mapped record batches."""
        blocks = np.searchsorted(self._block_starts, rows, side="right") - 1
        out = {name: np.empty((len(rows),) + values.shape[1:], dtype=values.dtype)
               for name, values in self._empty.items()}
        for block in np.unique(blocks):
            selected = blocks == block
            local = rows[selected] - self._block_starts[block]
            for name, values in self._blocks[block].items():
                out[name][selected] = values[local]
        return out


class PackedSequenceLoader(ExampleLoader):
    """The clm loader of the trunk: each item is input_ids alone, a LongTensor
    (batch_size, seq_len)."""

    def __init__(self, dataset_dir: str | os.PathLike, split: str, batch_size: int, rank: int = 0,
                 world_size: int = 1, seed: int = 0, shuffle: bool = True, drop_last: bool = True, *,
                 cache_dir: str | os.PathLike | None = None):
        super().__init__(dataset_dir, split, batch_size, rank, world_size, seed, shuffle, drop_last,
                         batch_builder=lambda index, seed: _input_ids, cache_dir=cache_dir)


def _input_ids(columns: dict[str, np.ndarray], example_ids: np.ndarray, epoch: int) -> torch.Tensor:
    return torch.from_numpy(columns["input_ids"].astype(np.int64))


def _map_shards(dataset_dir: Path, shards: list[dict], vocab_size: int, rank: int,
                world_size: int) -> tuple[list[dict[str, np.ndarray]], dict[str, np.ndarray]]:
    """Numpy views of every record batch of every shard, zero-copy over memory-mapped
    files: pages are read from disk only when a row is used; and empty arrays of the
    same columns (the shape of a batch with no rows). A file that cannot be read, holds
    another number of rows than index.json says, or (in this rank's share of the shards)
    holds token ids outside the vocabulary raises DamagedShardError naming it."""
    blocks, empty = [], None
    for shard_index, shard in enumerate(shards):
        path = dataset_dir / shard["path"]
        reader = open_shard(path)
        if empty is None:
            empty = column_arrays(pa.RecordBatch.from_pylist([], schema=reader.schema))
        shard_blocks = read_batches(reader, path)
        rows = sum(len(block["input_ids"]) for block in shard_blocks)
        if rows != shard["rows"]:
            raise DamagedShardError(
                f"{path} holds {rows} rows but index.json says {shard['rows']}: the dataset "
                f"is damaged; {REBUILD_HINT}")
        if should_check(shard_index, rank, world_size):
            check_token_ids(path, shard_blocks, vocab_size)
        blocks += shard_blocks
    assert empty is not None, "a split always has at least one shard"
    return blocks, empty
