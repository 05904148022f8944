"""Each fine-tuning task has its own fingerprint, so re-running one task re-runs nothing else.

    fingerprint = task_fingerprint("rte", cfg, seed=0, source=source)
    if reuse_finished_task(task_dir, fingerprint):   # copied from a sibling stage directory
        ...

The stage's own fingerprint covers the whole finetune section, `tasks` included: adding
`rte` to `tasks: [sst2]` gives the stage a new directory. A task's fingerprint covers only
what changes its results: its name, the finetune keys other than the task list and the
scheduling knobs, the seed, the model it starts from (the pretrain stage's directory is
content-addressed by fingerprint), the content digests of its own data files and of an
init_from folder (as the engine hashed them, `ctx.input_digests`) and a code version. A finished task (metrics.json written last) in
another directory of the same stage with the same fingerprint is copied instead of
trained again; so is nothing else.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

from stages.finetune.outputs import is_task_finished
from stages.training.model_source import ModelSource

FINGERPRINT_NAME = "task_fingerprint.json"
# Bump when a change to the fine-tuning code changes a task's results.
# 2: a finished task also holds hf/, its transformers folder (stages.finetune.hf_export).
TASK_CODE_VERSION = "2"
# Keys that decide which tasks run and how they are scheduled, not what a task computes.
NOT_IN_FINGERPRINT = {"tasks", "max_parallel_tasks", "max_failures"}
NOT_COPIED = ("wandb",)  # the earlier run's tracking files belong to that run


def task_identity(name: str, cfg, *, seed: int, source: ModelSource,
                  data: dict[str, str] | None = None) -> dict[str, Any]:
    """`data`: name -> content digest of the task's files and the init_from folder. The
    weight file's size and mtime stay too: a forced re-run of pretrain rewrites the
    weights in the same (fingerprint-named) directory."""
    weights = Path(source.path) / "model.safetensors"
    stat = weights.stat() if weights.is_file() else None
    return {
        "task": name, "code_version": TASK_CODE_VERSION, "seed": seed,
        "config": cfg.model_dump(mode="json", exclude=NOT_IN_FINGERPRINT),
        "source": {"format": source.format, "path": str(source.path),
                   "weights_bytes": stat.st_size if stat else None,
                   "weights_mtime_ns": stat.st_mtime_ns if stat else None},
        "data": dict(sorted((data or {}).items())),
    }


def task_fingerprint(name: str, cfg, *, seed: int, source: ModelSource,
                     data: dict[str, str] | None = None) -> str:
    identity = task_identity(name, cfg, seed=seed, source=source, data=data)
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:16]


def write_task_fingerprint(task_dir: Path, fingerprint: str) -> None:
    task_dir.mkdir(parents=True, exist_ok=True)
    (task_dir / FINGERPRINT_NAME).write_text(json.dumps({"fingerprint": fingerprint}) + "\n")


def read_task_fingerprint(task_dir: Path) -> str | None:
    path = Path(task_dir) / FINGERPRINT_NAME
    try:
        return json.loads(path.read_text())["fingerprint"]
    except (OSError, ValueError, KeyError):
        return None


def reuse_finished_task(task_dir: Path, fingerprint: str, metrics_log=None) -> Path | None:
    """Copy a finished task with this fingerprint from a sibling stage directory
    (`<workdir>/finetune/*/<task>/`) into `task_dir`, and its records from that stage's
    metrics.jsonl into `metrics_log` (the report draws its curves from them); returns
    where it came from, or None. Copied aside and renamed into place, so a crash never
    leaves a half-copied task that looks finished."""
    task_dir = Path(task_dir)
    for candidate in sorted(task_dir.parent.parent.glob(f"*/{task_dir.name}")):
        if (candidate == task_dir or not is_task_finished(candidate)
                or read_task_fingerprint(candidate) != fingerprint):
            continue
        staging = task_dir.with_name(task_dir.name + ".copying")
        shutil.rmtree(staging, ignore_errors=True)
        shutil.copytree(candidate, staging, ignore=shutil.ignore_patterns(*NOT_COPIED))
        if metrics_log is not None:
            from stages.tracking import MetricsLog

            # Records carry their own time already; MetricsLog.log would stamp a new one.
            with open(metrics_log.path, "a", encoding="utf-8") as f:
                f.writelines(json.dumps(record, default=float) + "\n"
                             for record in MetricsLog(candidate.parent / "metrics.jsonl").read()
                             if record.get("task") == task_dir.name)
        shutil.rmtree(task_dir, ignore_errors=True)
        staging.rename(task_dir)
        return candidate
    return None
