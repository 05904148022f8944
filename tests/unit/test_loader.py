"""PackedSequenceLoader on a synthetic dataset whose row r holds the tokens [r, r, r, r]."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from stages.data.loader import PackedSequenceLoader
from stages.data.packed import shard_path, write_index
from stages.data.row_writer import RowWriter

SEQ_LEN = 4
SHARD_ROWS = {"train": [1100, 0, 900, 37], "validation": [5, 3]}  # 1100 rows = 2 record batches


@pytest.fixture(scope="module")
def dataset_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("packed")
    splits = {}
    for split, sizes in SHARD_ROWS.items():
        (root / split).mkdir()
        first_row, shards = 0, []
        for i, rows in enumerate(sizes):
            writer = RowWriter(str(root / shard_path(split, i)), SEQ_LEN, "uint16")
            writer.add(np.repeat(np.arange(first_row, first_row + rows), SEQ_LEN))
            assert writer.commit() == rows
            shards.append({"path": shard_path(split, i), "rows": rows, "tokens": rows * SEQ_LEN})
            first_row += rows
        splits[split] = {"shards": shards, "rows": first_row, "tokens": first_row * SEQ_LEN}
    write_index(root, {"objective": "clm", "seq_len": SEQ_LEN, "vocab_size": 4096,
                       "dtype": "uint16", "eos_id": 0, "pad_id": 1, "splits": splits})
    return root


NUM_ROWS = sum(SHARD_ROWS["train"])


def row_ids(batch: torch.Tensor) -> list[int]:
    assert batch.dtype == torch.long and batch.shape[1] == SEQ_LEN
    assert (batch == batch[:, :1]).all()  # every row is intact
    return batch[:, 0].tolist()


def take(loaders: list[PackedSequenceLoader], steps: int) -> list[int]:
    """`steps` training steps on every rank; returns the rows in global-batch order."""
    seen = []
    for _ in range(steps):
        for loader in loaders:  # rank order within a global batch
            seen += row_ids(next(loader))
    return seen


def ranks(dataset_dir, world_size: int, batch_size: int = 16, **options):
    return [PackedSequenceLoader(dataset_dir, "train", batch_size, rank, world_size, seed=7,
                                 **options) for rank in range(world_size)]


def test_ranks_are_disjoint_and_cover_the_epoch(dataset_dir):
    loaders = ranks(dataset_dir, world_size=3)
    assert len(loaders[0]) == NUM_ROWS // 48 == 42 and loaders[0].num_rows == NUM_ROWS
    per_rank = [[] for _ in loaders]
    for _ in range(len(loaders[0])):
        for rank, loader in enumerate(loaders):
            batch = next(loader)
            assert batch.shape == (16, SEQ_LEN)
            per_rank[rank] += row_ids(batch)
    sets = [set(rows) for rows in per_rank]
    assert all(len(s) == 42 * 16 for s in sets)
    assert not (sets[0] & sets[1]) and not (sets[1] & sets[2]) and not (sets[0] & sets[2])
    assert len(set().union(*sets)) == 42 * 48  # only the last partial global batch is dropped
    assert loaders[0].state_dict() == {"epoch": 0, "samples_consumed": 42 * 48, "seed": 7}

    next(loaders[0])  # iteration goes on into the next epoch, in a new order
    assert loaders[0].epoch == 1 and loaders[0].samples_consumed == 48


def test_order_is_fixed_by_seed_and_epoch(dataset_dir):
    first, second = ranks(dataset_dir, 1)[0], ranks(dataset_dir, 1)[0]
    epoch0 = take([first], len(first))
    assert take([second], len(second)) == epoch0
    assert take([first], len(first)) != epoch0  # epoch 1 is reshuffled
    other = PackedSequenceLoader(dataset_dir, "train", 16, seed=8)
    assert take([other], 5) != epoch0[:80]


@pytest.mark.parametrize("new_world_size,new_batch_size", [(2, 16), (1, 16), (4, 16), (4, 5)])
def test_resume_mid_epoch_gives_the_uninterrupted_epoch(dataset_dir, new_world_size,
                                                        new_batch_size):
    reference = take(ranks(dataset_dir, 1, batch_size=NUM_ROWS), 1)  # the whole epoch 0

    before = ranks(dataset_dir, 2)
    seen = take(before, 10)
    state = before[0].state_dict()
    assert state == before[1].state_dict() == {"epoch": 0, "samples_consumed": 320, "seed": 7}

    after = ranks(dataset_dir, new_world_size, batch_size=new_batch_size)
    for loader in after:
        loader.load_state_dict(state)
    global_batch = new_world_size * new_batch_size
    while after[0].epoch == 0 and after[0].samples_consumed + global_batch <= NUM_ROWS:
        seen += take(after, 1)
    assert len(seen) == len(set(seen))  # nothing repeated
    assert seen == reference[:len(seen)]  # nothing skipped: the same order, a longer prefix
    assert NUM_ROWS - len(seen) < global_batch


def test_no_drop_last_and_no_shuffle_reads_every_row_in_order(dataset_dir):
    loaders = [PackedSequenceLoader(dataset_dir, "validation", 3, rank, 2, shuffle=False,
                                    drop_last=False) for rank in range(2)]
    assert len(loaders[0]) == len(loaders[1]) == 2
    assert take(loaders, 2) == list(range(8))  # batches 0-2 | 3-5 | 6-7 | (empty)
    assert loaders[1].epoch == 0 and loaders[0].samples_consumed == 8
    assert next(loaders[0]).tolist()[0] == [0] * SEQ_LEN  # and on to the next epoch


def test_errors_say_what_to_do(dataset_dir):
    with pytest.raises(ValueError, match="rank=2 must be in"):
        PackedSequenceLoader(dataset_dir, "train", 4, rank=2, world_size=2)
    with pytest.raises(ValueError, match="fewer than one global batch"):
        PackedSequenceLoader(dataset_dir, "validation", 9)
    with pytest.raises(ValueError, match="split 'test' is not in"):
        PackedSequenceLoader(dataset_dir, "test", 4)
    with pytest.raises(FileNotFoundError, match="not a finished dataset"):
        PackedSequenceLoader(dataset_dir / "train", "train", 4)
    loader = PackedSequenceLoader(dataset_dir, "train", 4, seed=1)
    with pytest.raises(ValueError, match="use the same seed"):
        loader.load_state_dict({"epoch": 0, "samples_consumed": 8, "seed": 2})
