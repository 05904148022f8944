"""Experiment tracking for stages: a JSONL file always, wandb when the config asks.

One wandb run per stage directory (per task for finetune), grouped by tracking.wandb.group
(a sweep's name) or else the experiment, and tagged with the stage and its fingerprint.
The run's id is kept in the directory (`wandb/run-id.txt`), so a stage that resumes there
after a crash continues its run instead of opening a new one; a forced re-run starts
from an empty directory and so gets a new run. Tracking must never fail a stage: any
wandb error becomes a warning and tracking carries on without wandb.
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


RUN_ID_FILE = Path("wandb") / "run-id.txt"  # under the stage (or task) directory


class Tracker:
    """Sends every record to the stage's JSONL log and, if open, to a wandb run.

    `wandb_holds_through_step`: the last step a resumed wandb run already holds. A wandb
    run's steps only go up (a lower one is dropped with a warning; a synced offline run
    gets its segments in order), and the steps between the checkpoint and the crash are
    trained, and logged, again. Those records go to the JSONL log only (it was trimmed
    back to the checkpoint, `MetricsLog.drop_records_after`); wandb keeps the first
    attempt's values for them, the same training replayed from the same checkpoint, and
    gets every step after them."""

    def __init__(self, metrics_log: MetricsLog, wandb_run: Any = None,
                 wandb_holds_through_step: int | None = None):
        self.metrics_log = metrics_log
        self._wandb_run = wandb_run
        self._wandb_holds_through_step = wandb_holds_through_step

    def log(self, metrics: dict[str, Any], step: int | None = None) -> None:
        self.metrics_log.log({**({"step": step} if step is not None else {}), **metrics})
        already_in_wandb = (step is not None and self._wandb_holds_through_step is not None
                            and step <= self._wandb_holds_through_step)
        if self._wandb_run is not None and not already_in_wandb:
            try:
                self._wandb_run.log(metrics, step=step)
            except Exception as error:  # noqa: BLE001 - tracking must not stop training
                self._disable(error)

    def log_table(self, key: str, columns: list[str], rows: list[list[Any]], step: int | None = None) -> None:
        """A wandb.Table under `key`, to wandb only: the caller keeps the rows in a JSONL
        file of its own (pretrain's samples.jsonl). Steps a resumed run holds already are
        skipped, as in `log`."""
        if self._wandb_run is None or (step is not None and self._wandb_holds_through_step is not None
                                       and step <= self._wandb_holds_through_step):
            return
        try:
            import wandb

            self._wandb_run.log({key: wandb.Table(columns=columns, data=rows)}, step=step)
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


def run_group(experiment) -> str:
    """tracking.wandb.group, else the experiment's name. (Configs built by hand, in tests
    or notebooks, may have no `group`.)"""
    return getattr(experiment.tracking.wandb, "group", None) or experiment.name


def run_tags(experiment, *own: str) -> list[str]:
    """The run's own tags (stage, task, fingerprint), then tracking.wandb.tags."""
    return [*own, *(getattr(experiment.tracking.wandb, "tags", None) or [])]


def open_tracker(*, experiment, stage: str, fingerprint: str, output_dir: Path,
                 config: dict | None = None, metrics_log: MetricsLog | None = None,
                 task: str | None = None) -> Tracker:
    """A Tracker writing `metrics_log` (default `output_dir/metrics.jsonl`), plus a wandb
    run if tracking.wandb.mode is offline or online (files under `output_dir/wandb`).
    `task`: a stage that runs several tasks (finetune) opens one run per task, named and
    tagged with it. Call it before trimming `metrics_log` to a checkpoint: a resumed run
    learns from the log which steps wandb holds already."""
    output_dir = Path(output_dir)
    metrics_log = metrics_log or MetricsLog(output_dir / "metrics.jsonl")
    tracking = getattr(experiment, "tracking", None)
    wandb_config = tracking.wandb if tracking is not None else None
    if wandb_config is None or wandb_config.mode == "disabled":
        return Tracker(metrics_log)
    run_id_file = output_dir / RUN_ID_FILE
    earlier_run_id = read_run_id(run_id_file)
    try:
        import wandb

        run = wandb.init(
            project=wandb_config.project, entity=wandb_config.entity, mode=wandb_config.mode,
            dir=str(output_dir), group=run_group(experiment), job_type=stage,
            name="-".join([experiment.name, stage, *([task] if task else []), fingerprint[:8]]),
            tags=run_tags(experiment, stage, *([task] if task else []), fingerprint),
            config=config or {}, reinit="create_new",
            # "allow": online, the run page goes on (or opens, if that run never reached
            # the server); offline, a new offline-run-* folder with the same id, which
            # `wandb sync` uploads after the earlier ones, into the same run.
            **({"id": earlier_run_id, "resume": "allow"} if earlier_run_id else {}),
        )
    except Exception as error:  # noqa: BLE001 - a tracking error is only a warning
        warnings.warn(f"wandb.init failed ({error}); tracking to {metrics_log.path} only",
                      stacklevel=2)
        return Tracker(metrics_log)
    if earlier_run_id is None:
        _keep_run_id(run_id_file, run.id)
        return Tracker(metrics_log, run)
    return Tracker(metrics_log, run, wandb_holds_through_step=_last_step_in_run(run, metrics_log, task))


def _last_step_in_run(run, metrics_log: MetricsLog, task: str | None) -> int | None:
    """The last step a resumed run holds. Online the server knows (starting_step is the
    step after it); offline it is 0, and the log, not yet trimmed to the checkpoint, ends
    with the last step the earlier attempt sent to this run."""
    try:
        logged = [record["step"] for record in metrics_log.read()
                  if "step" in record and (task is None or record.get("task") == task)]
    except (OSError, ValueError) as error:  # an unreadable log must not stop the stage
        warnings.warn(f"could not read {metrics_log.path} ({error}); wandb may drop the steps "
                      f"this attempt logs again", stacklevel=3)
        logged = []
    from_server = (getattr(run, "starting_step", 0) or 0) - 1
    return max([*logged, from_server]) if logged or from_server >= 0 else None


def read_run_id(path: Path) -> str | None:
    """The id kept by an earlier attempt in this directory, or None (never opened, or an
    unreadable file: a new run is better than no tracking)."""
    try:
        run_id = Path(path).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return run_id or None


def _keep_run_id(path: Path, run_id: str) -> None:
    """Written aside and renamed: a crash leaves no file or a whole id, never half of one."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        staging = path.with_name(path.name + ".partial")
        staging.write_text(run_id + "\n", encoding="utf-8")
        os.replace(staging, path)
    except OSError as error:
        warnings.warn(f"could not keep the wandb run id in {path} ({error}); a resumed stage "
                      f"will open a new run", stacklevel=3)
