"""In-loop evaluation: every eval_every steps and at the last, the validation metrics (the
loop's `validate`: val_loss, val_<part>_*, val_perplexity) and the in-loop tasks of
pretrain.eval_tasks (stages/pretrain/eval_tasks.py) join the step's record. Collective:
every rank evaluates at the same steps."""

from __future__ import annotations

from typing import Callable

from stages.pretrain.callbacks.base import Callback, LoopState
from stages.pretrain.config import PretrainConfig
from stages.pretrain.eval_tasks import TaskEvaluator


class InLoopEval(Callback):
    def __init__(self, cfg: PretrainConfig, engine, validate: Callable[[], dict[str, float]],
                 tasks: TaskEvaluator | None):
        self.cfg, self.engine = cfg, engine
        self.validate = validate
        self.tasks = tasks  # None without pretrain.eval_tasks

    def post_step(self, loop: LoopState) -> None:
        if loop.step % self.cfg.eval_every == 0 or loop.step == self.cfg.max_steps:
            loop.metrics.update(step=loop.step, **self.validate())
            if self.tasks is not None:
                loop.metrics.update(self.tasks.evaluate(self.engine))
