"""pretrain.samples: generations from the live model at the sampler's steps
(stages/pretrain/samples.py), written by rank 0 with the tracker's wandb table. Before the
step's checkpoint (a committed checkpoint implies its samples are written), and outside
the step's timing, so throughput does not count it; the seconds go into the summary."""

from __future__ import annotations

from typing import Any

from stages.pretrain.callbacks.base import Callback, LoopState
from stages.pretrain.callbacks.tracking import Tracking
from stages.pretrain.config import PretrainConfig
from stages.pretrain.samples import Sampler


class Samples(Callback):
    def __init__(self, sampler: Sampler, tracking: Tracking, cfg: PretrainConfig, engine, is_main: bool):
        self.sampler, self.tracking, self.cfg = sampler, tracking, cfg
        self.engine, self.is_main = engine, is_main
        self.seconds = 0.0

    def pre_train(self, loop: LoopState) -> None:
        if self.is_main:
            self.sampler.resume(loop.resumed_from_step)  # as metrics.jsonl: each step's samples once

    def post_step(self, loop: LoopState) -> None:
        if self.sampler.due(loop.step, self.cfg):
            self.seconds += self.sampler.sample_live(self.engine, loop.step, loop.tokens_seen, self.is_main,
                                                     self.tracking.tracker)

    def summary(self, loop: LoopState) -> dict[str, Any]:
        return {"sampling_seconds": self.seconds}
