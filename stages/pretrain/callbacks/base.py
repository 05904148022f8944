"""The seam between the pretraining loop and its callbacks.

    loop = LoopState(step=..., tokens_seen=..., resumed_from_step=..., tokens_per_step=...)
    for callback in callbacks: callback.pre_train(loop)
    while ...:                                  # one optimizer step
        loop.metrics = {...}                    # the step's training record, or {}
        for callback in callbacks: callback.post_step(loop)
        ... checkpoint (its summary: checkpoint_summary.py) ...
    for callback in callbacks: callback.post_train(loop)   # after the last checkpoint is committed

The order of the list is the order of the work within a step, and it matters: the
evaluation adds to loop.metrics before tracking logs them, and the samples and weights are
written before the step's checkpoint (a committed checkpoint implies they are complete).
Hooks that are collective (evaluation, weight gathering) run on every rank at the same steps.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class LoopState:
    """What the loop has done so far; the loop advances it, callbacks read it (and add to
    `metrics`)."""

    step: int  # optimizer steps done, the restored checkpoint's included
    tokens_seen: int  # counted, not step x tokens_per_step: a run may resume on another number of workers
    resumed_from_step: int  # the checkpoint this session started from (0: a fresh run)
    tokens_per_step: int  # over every rank
    # this step's record: the training metrics at logging steps, then what callbacks add; {} when nothing is due
    metrics: dict[str, Any] = field(default_factory=dict)
    last_metrics: dict[str, Any] = field(default_factory=dict)  # the last value of every metric logged
    steps_this_session: int = 0
    train_seconds: float = 0.0  # in optimizer steps this session (not evaluation, samples or checkpoints)


class Callback:
    """One concern of the loop; every hook does nothing unless a callback overrides it."""

    def pre_train(self, loop: LoopState) -> None:
        """Once, after the engine exists and the checkpoint (if any) is restored."""

    def post_step(self, loop: LoopState) -> None:
        """After each optimizer step, before its checkpoint."""

    def summary(self, loop: LoopState) -> dict[str, Any]:
        """Its entries in each checkpoint's summary (checkpoint_summary.py)."""
        return {}

    def post_train(self, loop: LoopState) -> None:
        """Once, after the last checkpoint is committed."""
