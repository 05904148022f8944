"""Which extra state (step, world size, loader position, RNG) each rank resumes with,
when the world size is the same or changed. Files written with torch.save, as
report_checkpoint writes them; no Ray, no DeepSpeed."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from stages.training.checkpoint import (
    EXTRA_STATE_NAME,
    capture_rng_state,
    read_extra_state,
    restore_rng_state,
    seed_rng,
)


def write_checkpoint(directory, world_size: int, step: int = 6) -> None:
    for rank in range(world_size):
        torch.manual_seed(100 + rank)
        state = {"loader": {"epoch": 0, "samples_consumed": 48, "seed": 0}, "step": step,
                 "world_size": world_size, "rng": capture_rng_state()}
        torch.save(state, directory / EXTRA_STATE_NAME.format(rank=rank))


def test_same_world_size_gives_each_rank_its_own_state(tmp_path):
    write_checkpoint(tmp_path, world_size=2)
    for rank in range(2):
        state = read_extra_state(tmp_path, rank, 2, where="ckpt")
        torch.manual_seed(100 + rank)
        assert torch.equal(state["rng"]["torch"], torch.get_rng_state())
        assert state["world_size"] == 2 and state["step"] == 6


def test_fewer_workers_keep_their_own_rng_and_the_global_loader_position(tmp_path):
    write_checkpoint(tmp_path, world_size=2)
    state = read_extra_state(tmp_path, 0, 1, where="ckpt")
    assert state["world_size"] == 2 and "rng" in state  # rank 0 existed before
    assert state["loader"]["samples_consumed"] == 48


def test_a_new_rank_takes_rank_0s_state_without_its_rng(tmp_path):
    write_checkpoint(tmp_path, world_size=1)
    state = read_extra_state(tmp_path, 1, 2, where="ckpt")
    assert "rng" not in state and state["step"] == 6 and state["loader"]["samples_consumed"] == 48


def test_a_checkpoint_without_our_state_is_refused(tmp_path):
    with pytest.raises(RuntimeError, match="ckpt has no extra_state_rank0.pt.*delete the run's storage"):
        read_extra_state(tmp_path, 0, 1, where="ckpt")


def test_reseeded_ranks_get_distinct_reproducible_streams():
    draws = {}
    for rank in (0, 1):
        seed_rng(step=6, rank=rank)
        draws[rank] = (torch.rand(3), np.random.rand(), random.random())
    seed_rng(step=6, rank=1)
    assert torch.equal(torch.rand(3), draws[1][0])
    assert not torch.equal(draws[0][0], draws[1][0]) and draws[0][1] != draws[1][1]


def test_rng_state_round_trips():
    state = capture_rng_state()
    first = (torch.rand(2), np.random.rand(), random.random())
    restore_rng_state(state)
    assert torch.equal(torch.rand(2), first[0]) and np.random.rand() == first[1] and random.random() == first[2]
