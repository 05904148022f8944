"""How rows are dealt out to data-parallel ranks for training and for prediction."""

from __future__ import annotations

import numpy as np
import pytest

from stages.finetune.batches import (
    merge_shards, micro_batches_per_epoch, prediction_shard, train_batches,
)


def all_rank_batches(num_examples, world_size, epoch, seed=0, micro_batch_size=4):
    return [train_batches(num_examples, micro_batch_size=micro_batch_size, epoch=epoch, seed=seed,
                          rank=rank, world_size=world_size) for rank in range(world_size)]


def test_ranks_get_disjoint_equal_shares_with_the_same_step_count():
    per_rank = all_rank_batches(num_examples=101, world_size=2, epoch=0)
    assert len(per_rank[0]) == len(per_rank[1]) == micro_batches_per_epoch(101, 2, 4) == 13
    rows = [np.concatenate(batches) for batches in per_rank]
    assert len(rows[0]) == len(rows[1]) == 50  # 101 // 2; one row sits this epoch out
    assert not set(rows[0]) & set(rows[1])


def test_shuffle_is_deterministic_per_epoch_and_differs_between_epochs():
    again = all_rank_batches(100, 2, epoch=1)
    assert all(np.array_equal(a, b) for a, b in zip(all_rank_batches(100, 2, epoch=1)[0], again[0]))
    epoch0 = np.concatenate(all_rank_batches(100, 2, epoch=0)[0])
    assert not np.array_equal(epoch0, np.concatenate(again[0]))


def test_too_few_examples_for_the_workers_is_explained():
    with pytest.raises(ValueError, match="1 training examples cannot be split over 2 workers"):
        micro_batches_per_epoch(1, 2, 4)


@pytest.mark.parametrize("num_examples, world_size", [(872, 2), (873, 2), (5, 3), (1, 2)])
def test_prediction_shards_are_equal_sized_and_merge_back_in_order(num_examples, world_size):
    shards = [prediction_shard(num_examples, rank=r, world_size=world_size) for r in range(world_size)]
    assert len({len(s) for s in shards}) == 1  # same number of forward passes on every rank
    outputs = [(s, np.stack([s, -s], axis=1).astype(np.float32)) for s in shards]
    merged = merge_shards(num_examples, outputs)
    assert merged.shape == (num_examples, 2)
    assert merged[:, 0].tolist() == list(range(num_examples))
