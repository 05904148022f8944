"""Experiment tracking for stages: a JSONL file always, wandb when the config asks.

One wandb run per stage execution, grouped by experiment and tagged with the stage and
its fingerprint. Tracking must never fail a stage: any wandb error becomes a warning and
tracking carries on without wandb.
"""

from __future__ import annotations

import json
import time
import warnings
from pathlib import Path
from typing import Any


class Tracker:
    def __init__(self, jsonl_path: Path, wandb_run: Any = None):
        self.jsonl_path = Path(jsonl_path)
        self.jsonl_path.parent.mkdir(parents=True, exist_ok=True)
        self._wandb_run = wandb_run

    def log(self, metrics: dict[str, Any], step: int | None = None) -> None:
        record = {"time": time.time(), **({"step": step} if step is not None else {}), **metrics}
        with open(self.jsonl_path, "a", encoding="utf-8") as f:
            f.write(json.dumps(record, default=float) + "\n")
        if self._wandb_run is not None:
            try:
                self._wandb_run.log(metrics, step=step)
            except Exception as error:  # noqa: BLE001 - tracking must not stop training
                self._disable(error)

    def summary(self, metrics: dict[str, Any]) -> None:
        if self._wandb_run is not None:
            try:
                self._wandb_run.summary.update(metrics)
            except Exception as error:  # noqa: BLE001
                self._disable(error)

    def finish(self) -> None:
        if self._wandb_run is not None:
            try:
                self._wandb_run.finish()
            except Exception as error:  # noqa: BLE001
                warnings.warn(f"wandb finish failed: {error}", stacklevel=2)
            self._wandb_run = None

    def _disable(self, error: Exception) -> None:
        warnings.warn(f"wandb logging failed, continuing without it: {error}", stacklevel=3)
        self._wandb_run = None


def open_tracker(*, experiment, stage: str, fingerprint: str, output_dir: Path,
                 config: dict | None = None, jsonl_name: str = "metrics.jsonl") -> Tracker:
    """A Tracker writing `output_dir/jsonl_name`, plus a wandb run if tracking.wandb.mode
    is offline or online (offline files go under `output_dir/wandb`)."""
    output_dir = Path(output_dir)
    wandb_config = experiment.tracking.wandb
    run = None
    if wandb_config.mode != "disabled":
        try:
            import wandb

            run = wandb.init(
                project=wandb_config.project, entity=wandb_config.entity, mode=wandb_config.mode,
                dir=str(output_dir), group=experiment.name, job_type=stage,
                name=f"{experiment.name}-{stage}-{fingerprint[:8]}",
                tags=[stage, fingerprint], config=config or {}, reinit="create_new",
            )
        except Exception as error:  # noqa: BLE001 - a tracking error is only a warning
            warnings.warn(f"wandb.init failed ({error}); tracking to {jsonl_name} only", stacklevel=2)
    return Tracker(output_dir / jsonl_name, run)
