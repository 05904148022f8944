"""Checkpoint a DeepSpeed engine plus our own training state to Ray Train (worker side).

    state = restore_latest(engine)            # None on a fresh run
    if state is not None:
        step = state["step"]; loader.load_state_dict(state["loader"])
    ...
    report_checkpoint(engine, step, {"loader": loader.state_dict()}, metrics)

Every rank calls both functions (they are collective). A checkpoint directory holds:

    latest, global_step<N>/...        DeepSpeed: model, optimizer (ZeRO shards, one file
                                      per rank), lr scheduler, DeepSpeed's step counters
    extra_state_rank<R>.pt            ours, per rank: step, world_size, RNG states, and the
                                      caller's extra_state (e.g. the data loader position,
                                      which differs per rank)

Each rank writes its files into its own temporary directory and reports it; Ray Train
merges the ranks' files into one checkpoint directory in storage (the file names never
collide) and commits it only when every rank has reported, which makes
`ray.train.report` a barrier.
"""

from __future__ import annotations

import random
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

EXTRA_STATE_NAME = "extra_state_rank{rank}.pt"


def report_checkpoint(engine, step: int, extra_state: dict[str, Any], metrics: dict[str, Any]) -> None:
    """Save `engine` and `extra_state` at `step` and report them with `metrics`.

    Only rank 0's metrics are kept by Ray Train (they become `Result.metrics` for the
    last checkpoint)."""
    import ray.train

    rank = ray.train.get_context().get_world_rank()
    world_size = ray.train.get_context().get_world_size()
    local_dir = Path(tempfile.mkdtemp(prefix=f"checkpoint-step{step}-rank{rank}-"))
    try:
        # Collective: all ranks write their ZeRO shards; rank 0 also writes the module
        # weights and the `latest` tag file.
        engine.save_checkpoint(str(local_dir), tag=f"global_step{step}")
        # Our keys last: a caller's extra_state cannot shadow what restore_latest relies on.
        state = {**extra_state, "step": step, "world_size": world_size, "rng": capture_rng_state()}
        torch.save(state, local_dir / EXTRA_STATE_NAME.format(rank=rank))
        ray.train.report(
            metrics,
            checkpoint=ray.train.Checkpoint.from_directory(str(local_dir)),
            checkpoint_dir_name=f"checkpoint-step{step:08d}",
        )
    finally:
        shutil.rmtree(local_dir, ignore_errors=True)


def restore_latest(engine) -> dict[str, Any] | None:
    """Load the last committed checkpoint into `engine`, restore this rank's RNG states,
    and return the extra state saved with it (including "step"); None if there is none."""
    import ray.train

    checkpoint = ray.train.get_checkpoint()
    if checkpoint is None:
        return None
    rank = ray.train.get_context().get_world_rank()
    world_size = ray.train.get_context().get_world_size()
    with checkpoint.as_directory() as directory:
        state_path = Path(directory) / EXTRA_STATE_NAME.format(rank=rank)
        if not state_path.is_file():
            raise RuntimeError(
                f"checkpoint {checkpoint.path} has no {state_path.name}: it was written by "
                f"fewer than {world_size} workers. Resume with the num_workers it was "
                "written with, or delete the run's storage directory to start over."
            )
        # Our own file, holding numpy RNG state and loader dicts: not weights-only.
        state = torch.load(state_path, weights_only=False)
        if state["world_size"] != world_size:
            raise RuntimeError(
                f"checkpoint {checkpoint.path} was written by {state['world_size']} workers, "
                f"this run has {world_size}: ZeRO shards and data positions are per worker. "
                f"Set num_workers={state['world_size']} to resume, or delete the run's "
                "storage directory to start over."
            )
        load_path, _ = engine.load_checkpoint(
            directory, load_optimizer_states=True, load_lr_scheduler_states=True
        )
        if load_path is None:
            raise RuntimeError(f"DeepSpeed found no checkpoint to load in {checkpoint.path}")
    restore_rng_state(state.pop("rng"))
    return state


def capture_rng_state() -> dict[str, Any]:
    """Every RNG a training step may draw from (dropout, shuffling, sampling)."""
    state = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
