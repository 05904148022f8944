"""Where the loop's metrics go: rank 0's progress line (stages/training/progress.py), and
each step's record into the last values every rank keeps and rank 0's metrics.jsonl and
wandb (stages/tracking.py)."""

from __future__ import annotations

from stages.pretrain.callbacks.base import Callback, LoopState
from stages.training.progress import ProgressLines


class Progress(Callback):
    def __init__(self, lines: ProgressLines | None):
        self.lines = lines  # None on ranks other than 0

    def post_step(self, loop: LoopState) -> None:
        if self.lines is not None:  # the loss: the last interval's mean, already on the host
            self.lines.update(1, amount=loop.tokens_per_step, loss=loop.metrics.get("loss"))

    def post_train(self, loop: LoopState) -> None:
        if self.lines is not None:
            self.lines.close()


class Tracking(Callback):
    """Every rank keeps the last value of each metric (each checkpoint's summary reads
    them); rank 0's tracker logs each step's record and, at the end, the summary."""

    def __init__(self, tracker):
        self.tracker = tracker  # stages.tracking's Tracker on rank 0, None elsewhere

    def pre_train(self, loop: LoopState) -> None:
        if self.tracker is not None:
            # The steps after the checkpoint (logged before a crash, or by an attempt killed
            # before its first checkpoint) are trained again: drop their records, so that
            # metrics.jsonl holds each step once.
            self.tracker.metrics_log.drop_records_after(loop.resumed_from_step)

    def post_step(self, loop: LoopState) -> None:
        if loop.metrics:
            loop.last_metrics.update(loop.metrics)
            if self.tracker is not None:
                self.tracker.log(loop.metrics, step=loop.step)

    def post_train(self, loop: LoopState) -> None:
        if self.tracker is not None:
            self.tracker.summary(loop.last_metrics)
            self.tracker.finish()
