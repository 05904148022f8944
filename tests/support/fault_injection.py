"""Test-only pieces that let a test kill a training worker at a known point of a real
pretrain run (tests/integration/test_pretrain_faults.py). Importable by Ray workers
(`tests` is a package and the repository is on their PYTHONPATH).

- pid_recording_loop: the stage's training loop, after writing this rank's pid to
  <output_dir>/pids/rank<R>-<pid>, so the test knows which process to kill.
- FreezeOnceContext: a StageContext whose metrics log makes rank 0 stop (sleep) right
  after it logs step `freeze_at`, on the first attempt only (a marker file remembers):
  the run then waits, mid-run and after a committed checkpoint, for the test's kill;
  the restarted attempt runs through.
- wait_forever_after_marking: a training loop that writes `config["marker"]` and then
  sleeps, for a test that interrupts a run known to be training.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.context import StageContext
from stages.tracking import MetricsLog


def wait_forever_after_marking(config: dict) -> None:
    Path(config["marker"]).write_text("started")
    time.sleep(600)


def pid_recording_loop(loop_config: dict) -> None:
    import ray.train

    from stages.pretrain.job import PretrainJob
    from stages.pretrain.train_loop import train_loop_per_worker

    rank = ray.train.get_context().get_world_rank()
    pids_dir = PretrainJob.from_loop_config(loop_config).output_dir / "pids"
    pids_dir.mkdir(exist_ok=True)
    (pids_dir / f"rank{rank}-{os.getpid()}").touch()
    train_loop_per_worker(loop_config)


class FreezeOnceMetricsLog(MetricsLog):
    def __init__(self, path: Path, freeze_at: int, marker: Path):
        super().__init__(path)
        self.freeze_at, self.marker = freeze_at, marker

    def log(self, record: dict[str, Any]) -> None:
        super().log(record)
        if record.get("step", 0) >= self.freeze_at and not self.marker.exists():
            self.marker.touch()
            time.sleep(3600)  # until the test kills a worker and Ray Train tears this one down


@dataclass
class FreezeOnceContext(StageContext):
    freeze_at: int = 0

    @property
    def frozen_marker(self) -> Path:
        return self.output_dir / "frozen-once"

    @property
    def metrics_log(self) -> MetricsLog:
        return FreezeOnceMetricsLog(self.output_dir / "metrics.jsonl", self.freeze_at, self.frozen_marker)
