"""Experiment tracking for stages: a JSONL file always, wandb when the config asks.

One wandb run per stage execution, grouped by experiment and tagged with the stage and
its fingerprint. Tracking must never fail a stage: any wandb error becomes a warning and
tracking carries on without wandb.
"""

from __future__ import annotations

import json
import os
import time
import warnings
from pathlib import Path
from typing import Any


class MetricsLog:
    """JSONL metrics file in a stage's output directory, appended to (and trimmed back to
    a checkpoint's step when training resumes: `drop_records_after`).

    Every record gets a wall-clock `time`; training adds `step`. One file per stage run
    so that the report stage can plot curves without knowing who wrote them.
    """

    def __init__(self, path: Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def log(self, record: dict[str, Any]) -> None:
        line = json.dumps({"time": time.time(), **record}, default=float)
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(line + "\n")

    def read(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        with open(self.path, encoding="utf-8") as f:
            return [json.loads(line) for line in f if line.strip()]

    def drop_records_after(self, step: int) -> None:
        """Forget the records of steps after `step`, the checkpoint a training run resumes
        from: the steps past it are trained, and logged, again, and the file should hold
        one trajectory (people read it directly, not only through the report). Records
        without a step are kept. The file is rewritten under a temporary name and renamed,
        so a crash leaves the old file or the new one, never half of it."""
        records = self.read()
        kept = [record for record in records if record.get("step", 0) <= step]
        if len(kept) != len(records):
            self.rewrite(kept)

    def rewrite(self, records: list[dict[str, Any]]) -> None:
        staging = self.path.with_name(self.path.name + ".partial")
        with open(staging, "w", encoding="utf-8") as f:
            f.writelines(json.dumps(record, default=float) + "\n" for record in records)
            f.flush()
            os.fsync(f.fileno())
        os.replace(staging, self.path)


class Tracker:
    """Sends every record to the stage's JSONL log and, if open, to a wandb run."""

    def __init__(self, metrics_log: MetricsLog, wandb_run: Any = None):
        self.metrics_log = metrics_log
        self._wandb_run = wandb_run

    def log(self, metrics: dict[str, Any], step: int | None = None) -> None:
        self.metrics_log.log({**({"step": step} if step is not None else {}), **metrics})
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
                 config: dict | None = None, metrics_log: MetricsLog | None = None,
                 task: str | None = None) -> Tracker:
    """A Tracker writing `metrics_log` (default `output_dir/metrics.jsonl`), plus a wandb
    run if tracking.wandb.mode is offline or online (files under `output_dir/wandb`).
    `task`: a stage that runs several tasks (finetune) opens one run per task, named and
    tagged with it."""
    output_dir = Path(output_dir)
    metrics_log = metrics_log or MetricsLog(output_dir / "metrics.jsonl")
    tracking = getattr(experiment, "tracking", None)
    wandb_config = tracking.wandb if tracking is not None else None
    run = None
    if wandb_config is not None and wandb_config.mode != "disabled":
        try:
            import wandb

            run = wandb.init(
                project=wandb_config.project, entity=wandb_config.entity, mode=wandb_config.mode,
                dir=str(output_dir), group=experiment.name, job_type=stage,
                name="-".join([experiment.name, stage, *([task] if task else []), fingerprint[:8]]),
                tags=[stage, *([task] if task else []), fingerprint], config=config or {},
                reinit="create_new",
            )
        except Exception as error:  # noqa: BLE001 - a tracking error is only a warning
            warnings.warn(f"wandb.init failed ({error}); tracking to {metrics_log.path} only",
                          stacklevel=2)
    return Tracker(metrics_log, run)
