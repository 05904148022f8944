"""Which extra state (step, world size, loader position, RNG) each rank resumes with,
when the world size is the same or changed, and how it is stored: JSON + safetensors as
report_checkpoint writes them, never a pickle. No Ray, no DeepSpeed."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from stages.training.checkpoint import (
    capture_rng_state,
    read_extra_state,
    restore_rng_state,
    seed_rng,
)
from stages.training.extra_state import save_extra_state


def write_checkpoint(directory, world_size: int, step: int = 6) -> None:
    for rank in range(world_size):
        torch.manual_seed(100 + rank)
        state = {"loader": {"epoch": 0, "samples_consumed": 48, "seed": 0}, "step": step,
                 "world_size": world_size, "rng": capture_rng_state()}
        save_extra_state(directory, rank, state)


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
    with pytest.raises(RuntimeError, match=r"ckpt has no extra_state_rank0\.json.*delete the run's storage"):
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


def test_rng_state_round_trips_through_the_checkpoint_files(tmp_path):
    random.random(), np.random.rand(), np.random.randn()  # a cached Gaussian in NumPy's state
    save_extra_state(tmp_path, 0, {"loader": {"epoch": np.int64(2)}, "step": 3, "world_size": 1,
                                   "rng": capture_rng_state()})
    first = (torch.rand(2), np.random.rand(), np.random.randn(), random.random())
    state = read_extra_state(tmp_path, 0, 1, where="ckpt")
    assert state["loader"] == {"epoch": 2} and sorted(p.name for p in tmp_path.iterdir()) == [
        "extra_state_rank0.json", "rng_state_rank0.safetensors"]
    restore_rng_state(state["rng"])
    again = (torch.rand(2), np.random.rand(), np.random.randn(), random.random())
    assert torch.equal(first[0], again[0]) and first[1:] == again[1:]


def test_a_pickled_checkpoint_of_older_versions_is_refused_unopened(tmp_path):
    marker = tmp_path / "code-ran"

    class RunsCode:
        def __reduce__(self):
            return (marker.touch, ())

    torch.save({"step": 6, "payload": RunsCode()}, tmp_path / "extra_state_rank0.pt")
    with pytest.raises(RuntimeError, match=r"ckpt was written by an older version.*"
                                           r"extra_state_rank0\.pt is a pickle"):
        read_extra_state(tmp_path, 0, 1, where="ckpt")
    assert not marker.exists()


def test_damaged_or_non_json_state_is_an_error_naming_the_file(tmp_path):
    write_checkpoint(tmp_path, world_size=1)
    (tmp_path / "rng_state_rank0.safetensors").write_bytes(b"\x00" * 16)
    with pytest.raises(RuntimeError, match=r"rng_state_rank0\.safetensors: cannot be read"):
        read_extra_state(tmp_path, 0, 1, where="ckpt")
    (tmp_path / "extra_state_rank0.json").write_text('{"step": ')
    with pytest.raises(RuntimeError, match=r"extra_state_rank0\.json: not valid JSON"):
        read_extra_state(tmp_path, 0, 1, where="ckpt")
    with pytest.raises(TypeError, match="must be JSON.*got a set"):
        save_extra_state(tmp_path, 0, {"step": 1, "seen": {1, 2}})
