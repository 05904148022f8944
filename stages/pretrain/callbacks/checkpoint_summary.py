"""The summary each checkpoint records (the stage's metrics in its manifest when the run
ends): the run's last metrics, its throughput this session, and what the callbacks add."""

from __future__ import annotations

from typing import Any

from stages.pretrain.callbacks.base import Callback, LoopState


def checkpoint_summary(loop: LoopState, num_parameters: int, callbacks: list[Callback]) -> dict[str, Any]:
    last = loop.last_metrics
    return {
        "steps": loop.step,
        "final_loss": last.get("loss"),
        "val_loss": last.get("val_loss"),
        "val_perplexity": last.get("val_perplexity"),
        "tokens_per_second": loop.tokens_per_step * loop.steps_this_session / max(loop.train_seconds, 1e-9),
        "num_parameters": num_parameters,
        "resumed_from_step": loop.resumed_from_step,
        "mfu": last.get("mfu"),
        **{key: value for callback in callbacks for key, value in callback.summary(loop).items()},
        # per-objective validation losses and accuracies (val_mlm_accuracy, ...),
        # and the last in-loop task scores (eval/<task>/<metric>)
        **{k: v for k, v in last.items() if k.startswith(("val_", "eval/"))},
    }
