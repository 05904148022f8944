"""Checkpoint a DeepSpeed engine plus our own training state to Ray Train (worker side).

    state = restore_latest(engine)            # None on a fresh run
    if state is not None:
        step = state["step"]; loader.load_state_dict(state["loader"])
    ...
    report_checkpoint(engine, step, {"loader": loader.state_dict()}, metrics)

Every rank calls both functions (they are collective). A checkpoint directory holds:

    latest, global_step<N>/...        DeepSpeed: model, optimizer (ZeRO shards, one file
                                      per rank), lr scheduler, DeepSpeed's step counters
    extra_state_rank<R>.json          ours, per rank: step, world_size, and the caller's
    rng_state_rank<R>.safetensors     extra_state (e.g. the data loader position, which
                                      differs per rank), RNG states; no pickle
                                      (stages.training.extra_state)

Each rank writes its files into its own temporary directory and reports it; Ray Train
merges the ranks' files into one checkpoint directory in storage (the file names never
collide) and commits it only when every rank has reported, which makes
`ray.train.report` a barrier.

Resuming on another number of workers (2 -> 1, 1 -> 2, ...): the world size each
checkpoint was written by is in its extra state, so restore_latest notices the change.
ZeRO shards and the bf16 optimizer's fp32 partitions are per rank, so such a checkpoint
is first converted into DeepSpeed's universal checkpoint (deepspeed.checkpoint.
ds_to_universal: one fp32 file per parameter with its Adam moments, sliceable for any
world size) and loaded with DeepSpeed's `load_universal` switch. Each rank converts into
its own local temporary directory: nothing is written to the run's storage and it works
when ranks share no file system; it costs one read of the checkpoint per rank. A ZeRO-0
fp32 checkpoint holds the whole optimizer in rank 0's file and loads on any world size
as it is. Our extra state then comes from rank 0: the data loader position is global
(stages.data.loader), so every rank can continue from it; RNG streams cannot be
resharded, so ranks without a saved stream of their own are reseeded from (step, rank).
"""

from __future__ import annotations

import contextlib
import io
import logging
import random
import shutil
import tempfile
import time
from argparse import Namespace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from stages.training.extra_state import (
    PICKLED_EXTRA_STATE_NAME,
    extra_state_path,
    load_extra_state,
    save_extra_state,
)

UNIVERSAL_TAG_FILE = "latest_universal"  # the name DeepSpeed's load_universal reads
# A forced stage starts in an emptied directory, its checkpoints included.
START_OVER = (" (`pretrain run CONFIG --force pretrain`, or `--force finetune`, starts the "
              "stage over in an emptied directory)")

logger = logging.getLogger(__name__)


def report_checkpoint(engine, step: int, extra_state: dict[str, Any], metrics: dict[str, Any]) -> dict[str, float]:
    """Save `engine` and `extra_state` at `step` and report them with `metrics`; returns
    the seconds each phase blocked training ("write": the files, "report": Ray Train's
    copy to storage and the barrier). pretrain.checkpoint_async overlaps both with
    training (stages.training.async_checkpoint).

    Only rank 0's metrics are kept by Ray Train (they become `Result.metrics` for the
    last checkpoint)."""
    import ray.train

    rank = ray.train.get_context().get_world_rank()
    local_dir = Path(tempfile.mkdtemp(prefix=f"checkpoint-step{step}-rank{rank}-"))
    try:
        started = time.perf_counter()
        write_local_checkpoint(engine, local_dir, step, extra_state)
        written = time.perf_counter()
        ray.train.report(
            metrics,
            checkpoint=ray.train.Checkpoint.from_directory(str(local_dir)),
            checkpoint_dir_name=checkpoint_dir_name(step),
        )
        return {"write": written - started, "report": time.perf_counter() - written}
    finally:
        shutil.rmtree(local_dir, ignore_errors=True)


def write_local_checkpoint(engine, local_dir: Path, step: int, extra_state: dict[str, Any]) -> None:
    """This rank's files of the checkpoint of `step` into `local_dir` (collective)."""
    import ray.train

    rank = ray.train.get_context().get_world_rank()
    world_size = ray.train.get_context().get_world_size()
    # Collective: all ranks write their ZeRO shards; rank 0 also writes the module
    # weights and the `latest` tag file.
    engine.save_checkpoint(str(local_dir), tag=f"global_step{step}")
    # Our keys last: a caller's extra_state cannot shadow what restore_latest relies on.
    state = {**extra_state, "step": step, "world_size": world_size, "rng": capture_rng_state()}
    save_extra_state(local_dir, rank, state)


def checkpoint_dir_name(step: int) -> str:
    return f"checkpoint-step{step:08d}"


def restore_latest(engine) -> dict[str, Any] | None:
    """Load the last committed checkpoint into `engine`, restore this rank's RNG states,
    and return the extra state saved with it (including "step", and "world_size" of the
    run that wrote it); None if there is none. Works on any world size (module doc)."""
    import ray.train

    checkpoint = ray.train.get_checkpoint()
    if checkpoint is None:
        return None
    rank = ray.train.get_context().get_world_rank()
    world_size = ray.train.get_context().get_world_size()
    with checkpoint.as_directory() as directory:
        directory = Path(directory)
        state = read_extra_state(directory, rank, world_size, where=str(checkpoint.path))
        if state["world_size"] == world_size:
            load_path, _ = engine.load_checkpoint(
                str(directory), load_optimizer_states=True, load_lr_scheduler_states=True
            )
        else:
            logger.warning("resuming a checkpoint of %d workers on %d: resharding it",
                           state["world_size"], world_size)
            load_path = _load_resharded(engine, directory)
        if load_path is None:
            raise RuntimeError(f"DeepSpeed found no checkpoint to load in {checkpoint.path}")
    if "rng" in state:
        restore_rng_state(state.pop("rng"))
    else:  # a rank the writing run did not have
        seed_rng(state["step"], rank)
    return state


def read_extra_state(directory: Path, rank: int, world_size: int, where: str) -> dict[str, Any]:
    """This rank's extra state if the checkpoint was written by as many workers as there
    are now; otherwise rank 0's, without its RNG states (they belong to another layout)."""
    first = extra_state_path(directory, 0)
    if not first.is_file():
        if (directory / PICKLED_EXTRA_STATE_NAME.format(rank=0)).is_file():
            raise RuntimeError(
                f"checkpoint {where} was written by an older version of this pipeline: its "
                f"{PICKLED_EXTRA_STATE_NAME.format(rank=0)} is a pickle, which is no longer "
                "loaded (unpickling a file can run code); delete the run's storage directory "
                f"to start over{START_OVER}")
        raise RuntimeError(
            f"checkpoint {where} has no {first.name}: it is not a checkpoint of this trainer "
            f"(or was damaged); delete the run's storage directory to start over{START_OVER}")
    if extra_state_path(directory, rank).is_file():
        return load_extra_state(directory, rank)
    return load_extra_state(directory, 0, with_rng=False)


def _load_resharded(engine, directory: Path) -> str | None:
    """Load a checkpoint written by another number of workers (module doc)."""
    tag = (directory / "latest").read_text().strip()
    if not list((directory / tag).glob("*optim_states.pt")):
        # No per-rank optimizer shards (ZeRO-0 in fp32): rank 0's file holds everything.
        load_path, _ = engine.load_checkpoint(
            str(directory), tag=tag, load_optimizer_states=True, load_lr_scheduler_states=True)
        return load_path
    with tempfile.TemporaryDirectory(prefix="universal-checkpoint-") as universal_dir:
        convert_to_universal(directory / tag, Path(universal_dir) / tag)
        (Path(universal_dir) / UNIVERSAL_TAG_FILE).write_text(tag)
        # DeepSpeed reads this switch (config "checkpoint": {"load_universal": true}) at
        # load time only, so it is turned on for this one load: the engine was built
        # before anyone knew the checkpoint's world size, and later saves stay ordinary.
        previous = engine._config.load_universal_checkpoint
        engine._config.load_universal_checkpoint = True
        # DeepSpeed 0.19.8's ZeRO-3 universal load gives every parameter group the first
        # group's hyperparameters (our no-decay group came back with weight decay 0.1),
        # and one shared `step` tensor to every group's Adam state (so each optimizer
        # step advanced it once per group, skewing the bias correction). The groups'
        # settings come from our config anyway, so they are put back, and each state gets
        # its own step counter. The lr stays as loaded: it is the restored schedule's.
        settings = [{key: value for key, value in group.items() if key not in ("params", "lr", "initial_lr")}
                    for group in engine.optimizer.param_groups]
        try:
            load_path, _ = engine.load_checkpoint(
                universal_dir, tag=tag, load_optimizer_states=True, load_lr_scheduler_states=True)
        finally:
            engine._config.load_universal_checkpoint = previous
        for group, setting in zip(engine.optimizer.param_groups, settings, strict=True):
            group.update(setting)
        base_optimizer = getattr(engine.optimizer, "optimizer", engine.optimizer)
        for state in base_optimizer.state.values():
            if torch.is_tensor(state.get("step")):
                state["step"] = state["step"].clone()
    return load_path


def convert_to_universal(tag_dir: Path, output_dir: Path) -> None:
    """DeepSpeed's ds_to_universal on one checkpoint tag directory, in this process (no
    worker pool: a Ray worker may not be allowed to fork many) and quietly (it prints
    and draws progress bars)."""
    from deepspeed.checkpoint.ds_to_universal import main as ds_to_universal

    args = Namespace(
        input_folder=str(tag_dir), output_folder=str(output_dir),
        num_extract_workers=1, num_merge_workers=1, keep_temp_folder=False, strict=True,
        # Megatron-DeepSpeed records per-parameter layout hints; a plain model has none
        # (nothing is tensor-parallel), and the converter then wants them injected.
        inject_missing_state=True,
    )
    output = io.StringIO()
    with contextlib.redirect_stdout(output), contextlib.redirect_stderr(output):
        try:
            ds_to_universal(args)
        except Exception as error:
            raise RuntimeError(f"converting {tag_dir} to a universal checkpoint failed: {error}\n"
                               f"{output.getvalue()[-2000:]}") from error


def seed_rng(step: int, rank: int) -> None:
    """Fresh, distinct streams for a rank with no saved RNG state."""
    seed = 1_000_003 * step + rank
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


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
