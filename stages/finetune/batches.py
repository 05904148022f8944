"""Which example rows each data-parallel rank sees, for training and for prediction.

Plain numpy and deterministic from (seed, epoch), so a restarted run shuffles exactly
as the interrupted one did, and every rank computes its share without talking to the
others.
"""

from __future__ import annotations

import math

import numpy as np


def examples_per_rank(num_examples: int, world_size: int) -> int:
    """Each rank trains on the same number of rows per epoch (the last `num_examples %
    world_size` of a shuffle are left out), so all ranks take the same number of steps:
    DeepSpeed's gradient all-reduce would hang on a rank with an extra batch."""
    if num_examples < world_size:
        raise ValueError(
            f"{num_examples} training examples cannot be split over {world_size} workers; "
            f"raise finetune.max_train_examples or lower finetune.num_workers"
        )
    return num_examples // world_size


def micro_batches_per_epoch(num_examples: int, world_size: int, micro_batch_size: int) -> int:
    return math.ceil(examples_per_rank(num_examples, world_size) / micro_batch_size)


def train_batches(num_examples: int, *, micro_batch_size: int, epoch: int, seed: int,
                  rank: int, world_size: int) -> list[np.ndarray]:
    """This rank's micro-batches (row positions) for one epoch: a fresh shuffle per epoch,
    the same on every rank, dealt out in contiguous slices."""
    per_rank = examples_per_rank(num_examples, world_size)
    order = np.random.default_rng([seed, epoch]).permutation(num_examples)
    mine = order[rank * per_rank:(rank + 1) * per_rank]
    return [mine[i:i + micro_batch_size] for i in range(0, per_rank, micro_batch_size)]


def prediction_shard(num_examples: int, *, rank: int, world_size: int) -> np.ndarray:
    """Row positions this rank predicts. Every rank gets the same count (the first rows
    are repeated at the end to fill up) so that each makes the same number of forward passes, which
    ZeRO-3 needs: its forward gathers parameters collectively. Repeats predict the same
    row twice and are dropped when the shards are merged."""
    per_rank = math.ceil(num_examples / world_size)
    padded = np.resize(np.arange(num_examples), per_rank * world_size)
    return padded[rank::world_size]


def merge_shards(num_examples: int, shards: list[tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
    """[(positions, outputs (n, k)), ...] from all ranks -> outputs (num_examples, k) in row order."""
    width = shards[0][1].shape[1]
    merged = np.zeros((num_examples, width), dtype=np.float32)
    seen = np.zeros(num_examples, dtype=bool)
    for positions, outputs in shards:
        merged[positions] = outputs
        seen[positions] = True
    assert seen.all(), "prediction shards must cover every row"
    return merged
