"""The weights the loop exports: output_dir/model at the last step, and a snapshot every
pretrain.snapshot_every steps (stages/pretrain/snapshots.py), each a folder of full fp32
weights, model_config.json and tokenizer.json. Before the step's checkpoint: a committed
checkpoint implies its snapshots are complete. Gathering sharded weights is collective,
so every rank takes the same decisions."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import torch.distributed as dist
import torch.nn as nn

from stages.pretrain.callbacks.base import Callback, LoopState
from stages.pretrain.job import PretrainJob
from stages.pretrain.snapshots import record_snapshot, remove_partial_snapshots, snapshot_path, write_model_folder
from stages.training.engine import full_fp32_state_dict


class WeightExport(Callback):
    def __init__(self, job: PretrainJob, engine, is_main: bool, new_model: Callable[[], nn.Module]):
        self.job, self.cfg, self.output_dir = job, job.config, job.output_dir
        self.engine, self.is_main = engine, is_main
        self.new_model = new_model  # a fresh model of the run's architecture, to write from

    def pre_train(self, loop: LoopState) -> None:
        if self.is_main and self.cfg.snapshot_every:
            remove_partial_snapshots(self.output_dir)

    def post_step(self, loop: LoopState) -> None:
        step = loop.step
        destinations = [self.output_dir / "model"] if step == self.cfg.max_steps else []
        snapshot_due = bool(self.cfg.snapshot_every) and step % self.cfg.snapshot_every == 0
        if snapshot_due and not self._snapshot_exists(step):
            destinations.append(snapshot_path(self.output_dir, step))
        self._write_weights(destinations)
        if snapshot_due and self.is_main:
            record_snapshot(self.output_dir, step, loop.tokens_seen)

    def post_train(self, loop: LoopState) -> None:
        if loop.steps_this_session == 0:
            # Resumed from the final checkpoint: the run had finished, but the driver died
            # before the engine recorded it. Export again (cheap) in case model/ is missing;
            # every rank must take part, so this does not depend on what one rank sees.
            self._write_weights([self.output_dir / "model"])

    def _write_weights(self, destinations: list[Path]) -> None:
        """Rank 0 writes the full fp32 weights, model_config.json and tokenizer.json into each
        of `destinations` (output_dir/model, a snapshot folder), each renamed into place when
        complete. Collective when there is anything to write, because gathering sharded
        weights is: every rank must pass the same number of destinations."""
        if not destinations:
            return
        state_dict = full_fp32_state_dict(self.engine)  # gathered once for every destination
        if not self.is_main:
            return
        model = self.new_model()
        model.load_state_dict(state_dict, strict=True)
        for final in destinations:
            final.parent.mkdir(parents=True, exist_ok=True)
            write_model_folder(model, self.job.tokenizer_path, final)

    def _snapshot_exists(self, step: int) -> bool:
        """Whether an earlier attempt of this run wrote the snapshot of `step` (a resumed run
        keeps it). Rank 0 looks and tells the others, so that every rank takes the same
        decision about the collective weight gathering."""
        decision = [snapshot_path(self.output_dir, step).is_dir() if self.is_main else None]
        dist.broadcast_object_list(decision, src=0)
        return bool(decision[0])
