"""Batches of packed token rows for training: memory-mapped, sharded by rank, seeded
shuffle per epoch, exact resume. torch + pyarrow (+ numpy) only: no Ray, no DeepSpeed,
no engine, so a training worker or a notebook can use it as is.

Order: epoch e visits every row of the split once, in the permutation fixed by
(seed, e). Global batch g is perm[g*W*B:(g+1)*W*B] for world size W and batch size B;
rank r takes the r-th slice of B rows. The position is one number, `samples_consumed`
(global, rows of this epoch handed to all ranks together), so a run can resume with a
different world size or batch size: no row is skipped or repeated within the epoch.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import torch

from stages.data.packed import read_index


class PackedSequenceLoader:
    """Iterates forever (epoch after epoch); each item is a LongTensor (batch_size, seq_len).

    shuffle=False reads rows in storage order (evaluation). drop_last=False keeps the
    epoch's last, partial global batch: a rank then gets fewer rows, possibly none (a
    (0, seq_len) tensor), so that every rank still takes the same number of steps.
    """

    def __init__(self, dataset_dir: str | os.PathLike, split: str, batch_size: int,
                 rank: int = 0, world_size: int = 1, seed: int = 0, shuffle: bool = True,
                 drop_last: bool = True):
        if not 0 <= rank < world_size:
            raise ValueError(f"rank={rank} must be in [0, world_size={world_size})")
        if batch_size < 1:
            raise ValueError(f"batch_size={batch_size} must be at least 1")
        self.index = read_index(dataset_dir)
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

        self._blocks = _map_shards(Path(dataset_dir), self.index["splits"][split]["shards"],
                                   self.seq_len)
        sizes = [len(block) for block in self._blocks]
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

    def __iter__(self) -> PackedSequenceLoader:
        return self

    def __next__(self) -> torch.Tensor:
        remaining = self.num_rows - self.samples_consumed
        if remaining <= 0 or (self.drop_last and remaining < self._global_batch):
            self.epoch += 1
            self.samples_consumed = 0
        start = self.samples_consumed + self.rank * self.batch_size
        stop = min(start + self.batch_size, self.num_rows)
        rows = self._epoch_permutation()[start:stop]
        self.samples_consumed = min(self.samples_consumed + self._global_batch, self.num_rows)
        return self._gather(rows)

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

    def _gather(self, rows: np.ndarray) -> torch.Tensor:
        """Copy the given global rows out of the memory-mapped record batches."""
        blocks = np.searchsorted(self._block_starts, rows, side="right") - 1
        batch = np.empty((len(rows), self.seq_len), dtype=np.int64)
        for i, (row, block) in enumerate(zip(rows, blocks, strict=True)):
            batch[i] = self._blocks[block][row - self._block_starts[block]]
        return torch.from_numpy(batch)


def _map_shards(dataset_dir: Path, shards: list[dict], seq_len: int) -> list[np.ndarray]:
    """(rows, seq_len) numpy views of every record batch of every shard, zero-copy over
    memory-mapped files: pages are read from disk only when a row is used."""
    blocks = []
    for shard in shards:
        reader = pa.ipc.open_file(pa.memory_map(str(dataset_dir / shard["path"])))
        for i in range(reader.num_record_batches):
            column = reader.get_batch(i).column(0)
            flat = column.flatten().to_numpy(zero_copy_only=True)
            blocks.append(flat.reshape(len(column), seq_len))
        rows = sum(len(block) for block in blocks[len(blocks) - reader.num_record_batches:])
        if rows != shard["rows"]:
            raise ValueError(f"{dataset_dir / shard['path']} holds {rows} rows but index.json "
                             f"says {shard['rows']}: the dataset is damaged; rebuild it")
    return blocks
