"""The report's content as plain data (what `metrics.json` holds and both renderers read).

Keys kept stable for readers of metrics.json: experiment, generated, stages, finetune
("task/metric" -> score), pretrain_curve. Added: lineage, stats, finetune_tasks,
glue_average, problems.
"""

from __future__ import annotations

import re
import time
from typing import Any

from stages.report.curves import pretrain_series, sample_curve
from stages.report.sources import RunSource, StageRecord

DATA_STAGES = ("ingest", "tokenizer", "dataset")
GLUE_TASKS = ("cola", "sst2", "mrpc", "stsb", "qqp", "mnli", "mnli_mm", "qnli", "rte", "wnli")
# Official scores of GLUE / SQuAD / CoNLL tasks; "f1_PER" or "f1/PER" (a CoNLL entity
# type) count as scores too. Counts like "sst2/train_examples" do not.
SCORE = re.compile(r"^(accuracy|f1|matthews(_corrcoef)?|pearson|spearman|exact_match|em)([_/].+)?$")


def build_report(source: RunSource, *, curve_points: int = 10) -> dict[str, Any]:
    """Everything the report shows except the full curves (those are read again when
    plotting, so metrics.json stays small for long runs)."""
    records = source.stages
    finetune = source.stage("finetune")
    scores = finetune_scores(finetune.metrics if finetune else {})
    tasks = group_by_task(scores)
    pretrain = source.stage("pretrain")
    return {
        "experiment": source.name,
        "generated": time.time(),
        "stages": [stage_row(s) for s in records],
        "finetune": scores,
        "finetune_tasks": tasks,
        "glue_average": glue_average(tasks),
        "pretrain_curve": sample_curve(pretrain_series(pretrain.directory if pretrain else None),
                                       curve_points),
        "stats": {s.stage: scalar_metrics(s.metrics) for s in records
                  if s.stage in DATA_STAGES and s.manifest},
        "lineage": lineage(source, records),
        "problems": problems(source, records, tasks),
    }


def stage_row(record: StageRecord) -> dict[str, Any]:
    metrics = scalar_metrics(record.metrics)
    if record.error:
        metrics = {"error": record.error[:200]}
    return {"stage": record.stage, "state": record.state, "fingerprint": record.fingerprint,
            "seconds": (record.manifest or {}).get("wall_seconds"), "metrics": metrics}


def scalar_metrics(metrics: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in metrics.items() if isinstance(v, (int, float, str)) and not isinstance(v, bool)}


def finetune_scores(metrics: dict[str, Any]) -> dict[str, float]:
    """'task/metric' -> score for the official metrics of every task, in stage order."""
    return {key: float(value) for key, value in metrics.items()
            if "/" in key and SCORE.match(key.split("/", 1)[1])
            and isinstance(value, (int, float)) and not isinstance(value, bool)}


def group_by_task(scores: dict[str, float]) -> dict[str, dict[str, float]]:
    tasks: dict[str, dict[str, float]] = {}
    for key, value in scores.items():
        task, metric = key.split("/", 1)
        tasks.setdefault(task, {})[metric] = value
    return tasks


def glue_average(tasks: dict[str, dict[str, float]]) -> dict[str, Any] | None:
    """The GLUE leaderboard's score over the GLUE tasks present: each task's metrics are
    averaged first (MRPC: F1 and accuracy; STS-B: Pearson and Spearman), then the tasks."""
    per_task = {task: sum(m.values()) / len(m) for task, m in tasks.items()
                if task in GLUE_TASKS and m}
    if not per_task:
        return None
    return {"score": sum(per_task.values()) / len(per_task), "tasks": sorted(per_task)}


def lineage(source: RunSource, records: list[StageRecord]) -> dict[str, Any]:
    rows, libraries, python = [], {}, None
    for record in records:
        manifest = record.manifest or {}
        rows.append({
            "stage": record.stage, "state": record.state, "fingerprint": record.fingerprint,
            "code_version": manifest.get("code_version"), "inputs": manifest.get("inputs", {}),
            "start_time": manifest.get("start_time"), "end_time": manifest.get("end_time"),
            "host": manifest.get("host"), "reused": is_reused(source, record),
        })
        libraries.update(manifest.get("libraries", {}))
        python = manifest.get("python") or python
    return {"stages": rows, "libraries": dict(sorted(libraries.items())), "python": python,
            "config": source.config}


def is_reused(source: RunSource, record: StageRecord) -> bool:
    """Finished before the latest run started: that run skipped it (cache hit)."""
    end = (record.manifest or {}).get("end_time")
    return bool(source.run_started and end and end < source.run_started)


def problems(source: RunSource, records: list[StageRecord],
             tasks: dict[str, dict[str, float]]) -> list[dict[str, str]]:
    """What a reader must know did not happen as planned: skipped, failed, unfinished or
    resumed stages, and fine-tuning tasks with no score."""
    found = []
    for record in records:
        metrics = record.metrics
        if record.state == "failed":
            found.append(_problem(record.stage, "failed", record.error or "failed (no error recorded)"))
        elif record.state == "incomplete":
            found.append(_problem(record.stage, "incomplete",
                                  "started but has no manifest yet: still running, or interrupted "
                                  "(run the same command again to resume)"))
        elif record.state == "not run":
            found.append(_problem(record.stage, "not run", "has not started"))
        elif is_reused(source, record):
            found.append(_problem(record.stage, "skipped",
                                  f"reused the cached result finished {format_time(record.manifest['end_time'])}"))
        if metrics.get("resumed_from_step"):
            found.append(_problem(record.stage, "resumed",
                                  f"resumed from the checkpoint at step {metrics['resumed_from_step']}"))
        if metrics.get("resumed_shards"):
            found.append(_problem(record.stage, "resumed",
                                  f"kept {metrics['resumed_shards']} shards from an interrupted attempt"))
    finetune = source.stage("finetune")
    if finetune is not None and finetune.state == "done":
        wanted = ((finetune.manifest or {}).get("config") or {}).get("tasks") or []
        for task in wanted:
            if task not in tasks:
                found.append(_problem("finetune", "missing", f"task {task} has no score"))
    return found


def _problem(stage: str, kind: str, message: str) -> dict[str, str]:
    return {"stage": stage, "kind": kind, "message": message}


def format_time(seconds: float | None) -> str:
    if not seconds:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(seconds))
