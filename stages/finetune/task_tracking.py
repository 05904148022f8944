"""Each fine-tuning task streams its own curves while it trains.

    tracker = open_task_tracker(job)     # rank 0 of the task's Ray Train run (a FinetuneJob)
    tracker.log({"loss": 0.41, "lr": 2e-5}, step=120)
    tracker.summary({"dev_accuracy": 0.91, ...}); tracker.finish()

Records go to the stage's metrics.jsonl with a "task" key (the report groups curves by
it), and to one wandb run per task (tracking.wandb.mode offline/online): grouped by
experiment, tagged "finetune", the task and the stage fingerprint, with the task's
scores and run facts as its summary; offline files under `<task dir>/wandb/`. The
engine therefore logs no end-of-stage run for finetune
(`pipeline.wandb_stage_log.STREAMS_ITS_OWN_RUN`). As everywhere, a wandb error is only a
warning (`stages.tracking.Tracker`).
"""

from __future__ import annotations

import fcntl
import json
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from stages.tracking import MetricsLog, Tracker, open_tracker

STAGE = "finetune"


class TaskMetricsLog(MetricsLog):
    """The stage's metrics.jsonl, with every record marked with its task (wandb gets no
    "task" field: the run itself is the task's). Tasks training at the same time share
    the file, so writes hold a lock (a separate lock file: the rewrite below replaces
    the log's inode)."""

    def __init__(self, path: Path, task: str):
        super().__init__(path)
        self.task = task

    def log(self, record: dict[str, Any]) -> None:
        with self._locked():
            super().log({"task": self.task, **record})

    def drop_records_after(self, step: int) -> None:
        """On a resume (or a restart of a task that crashed before its first checkpoint),
        forget this task's records past the checkpoint's step: they are logged again, and
        each task's curve should be one trajectory. Other tasks' records are kept."""
        with self._locked():
            records = self.read()
            kept = [r for r in records if r.get("task") != self.task or r.get("step", 0) <= step]
            if len(kept) == len(records):
                return
            staging = self.path.with_suffix(".jsonl.partial")
            with open(staging, "w", encoding="utf-8") as f:
                f.writelines(json.dumps(record, default=float) + "\n" for record in kept)
            os.replace(staging, self.path)

    @contextmanager
    def _locked(self):
        with open(self.path.with_name(f".{self.path.name}.lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
            yield


def open_task_tracker(job) -> Tracker:
    """job (a FinetuneJob) fields used: task, config (FinetuneConfig), task_dir,
    metrics_log, and tracking = {"experiment": ExperimentConfig, "fingerprint": the
    stage's, "task_fingerprint": the task's} (None: JSONL only)."""
    tracking = job.tracking or {}
    cfg = job.config
    return open_tracker(
        experiment=tracking.get("experiment"), stage=STAGE, fingerprint=tracking.get("fingerprint", ""),
        output_dir=Path(job.task_dir),
        config={"task": job.task, "task_fingerprint": tracking.get("task_fingerprint"),
                STAGE: cfg.model_dump() if hasattr(cfg, "model_dump") else dict(cfg)},
        metrics_log=TaskMetricsLog(job.metrics_log.path, job.task), task=job.task)


def prefixed(prefix: str, scores: dict[str, Any]) -> dict[str, Any]:
    """{"f1": 0.8} -> {"dev_f1": 0.8}: the split a score was measured on, in its name."""
    return {f"{prefix}{name}": value for name, value in scores.items()}
