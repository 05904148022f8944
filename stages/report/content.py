"""The report's content as plain data (what `metrics.json` holds and both renderers read).

Keys kept stable for readers of metrics.json: experiment, generated, stages, finetune
("task/metric" -> score), pretrain_curve. Added: lineage, stats, finetune_tasks,
glue_average, problems, finetune_context ({task: {metric: {"baseline", "ci95",
"verdict"}}}: each score's baseline, 95% interval and whether it is above the baseline;
`stages.report.scores`), evaluation ({task: {"kind", "shots", "num_examples",
"num_truncated", "num_skipped", "scores": {metric: {"value", "ci95", "baseline", "baseline_kind",
"higher_is_better", "verdict"}}}}: the evaluate stage's zero- and few-shot scores) and
evaluation_snapshots ([{"step", "tokens", "task", "metric", "value", "ci95", "baseline",
"higher_is_better", "verdict"}]: the same scores across pretraining;
`stages.report.evaluation`) and mixture ([{"source", "weight", "train_tokens",
"validation_tokens", "loss", "val_loss"}]: dataset.mixture's sources; `stages.report.mixture`)
and samples ({"num_steps", "settings", "steps": [{"step", "tokens_seen", "rows"}]}: what
the model wrote during pretraining, a few steps of it; `stages.report.samples`).
"""

from __future__ import annotations

import hashlib
import time
from typing import Any

from stages.finetune.score_context import describe, read_contexts
from stages.report.curves import pretrain_series, sample_curve
from stages.report.evaluation import (
    chance_problem, key_scores, read_evaluation, read_snapshots, unreliable_problems,
)
from stages.report.mixture import mixture_rows
from stages.report.samples import read_samples
from stages.report.scores import (
    chance_problems, finetune_scores, glue_average, group_by_task, score_contexts, unreadable_problems,
)
from stages.report.sources import RunSource, StageRecord, read_run_index
from stages.report.summary import build_summary

DATA_STAGES = ("ingest", "tokenizer", "dataset")
DEFAULT_MAX_UNREADABLE_FRACTION = 0.1  # finetune.max_unreadable_fraction where a manifest predates it


def build_report(source: RunSource, *, curve_points: int = 10) -> dict[str, Any]:
    """Everything the report shows except the full curves (those are read again when
    plotting, so metrics.json stays small for long runs)."""
    records = source.stages
    finetune = source.stage("finetune")
    scores = finetune_scores(finetune.metrics if finetune else {})
    tasks = group_by_task(scores)
    contexts = score_contexts(finetune.metrics if finetune else {}, tasks)
    pretrain = source.stage("pretrain")
    evaluation = read_evaluation(source.stage("evaluate"))
    snapshots, snapshot_problem = read_snapshots(source.stage("evaluate"))
    series = pretrain_series(pretrain.directory if pretrain else None)
    dataset = source.stage("dataset")
    glue = glue_average(tasks, contexts)
    return {
        "experiment": source.name,
        "generated": time.time(),
        "stages": [stage_row(s) for s in records],
        "finetune": scores,
        "finetune_tasks": tasks,
        "finetune_context": contexts,
        "glue_average": glue,
        "summary": build_summary(source, series, evaluation, glue),
        "pretrain_curve": sample_curve(series, curve_points),
        "mixture": mixture_rows(dataset.metrics if dataset else {}, series),
        "stats": {s.stage: scalar_metrics(s.metrics) for s in records
                  if s.stage in DATA_STAGES and s.manifest},
        "evaluation": evaluation,
        "evaluation_snapshots": snapshots,
        "samples": read_samples(pretrain.directory if pretrain else None),
        "lineage": lineage(source, records),
        "problems": problems(source, records, tasks, contexts)
        + evaluation_problems(evaluation, snapshot_problem),
    }


def stage_row(record: StageRecord) -> dict[str, Any]:
    metrics = scalar_metrics(record.metrics)
    if record.stage == "finetune":  # its scores, each with interval, baseline and verdict
        contexts = read_contexts(record.metrics)
        metrics = {k: describe(v, contexts.get(k)) for k, v in finetune_scores(record.metrics).items()}
    if record.stage == "evaluate":  # its key scores, each judged against its baseline the same way
        metrics = key_scores(record.metrics)
    if record.error:
        metrics = {"error": record.error[:200]}
    return {"stage": record.stage, "state": record.state, "fingerprint": record.fingerprint,
            "seconds": (record.manifest or {}).get("wall_seconds"), "metrics": metrics}


def scalar_metrics(metrics: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in metrics.items() if isinstance(v, (int, float, str)) and not isinstance(v, bool)}


def lineage(source: RunSource, records: list[StageRecord]) -> dict[str, Any]:
    rows, libraries, python = [], {}, None
    for record in records:
        manifest = record.manifest or {}
        rows.append({
            "stage": record.stage, "state": record.state, "fingerprint": record.fingerprint,
            "code_version": manifest.get("code_version"), "inputs": manifest.get("inputs", {}),
            "data": data_digest(manifest),
            "start_time": manifest.get("start_time"), "end_time": manifest.get("end_time"),
            "host": manifest.get("host"), "reused": is_reused(source, record),
        })
        libraries.update(manifest.get("libraries", {}))
        python = manifest.get("python") or python
    return {"stages": rows, "libraries": dict(sorted(libraries.items())), "python": python,
            "git_commit": read_run_index(source.run_dir).get("git_commit") if source.run_dir else None,
            "config": source.config}


def data_digest(manifest: dict[str, Any]) -> dict[str, Any] | None:
    """{"files", "sha256"}: how many files the stage read besides its input stages (the
    corpus, task files: the fingerprint's `data`, name -> sha256) and one digest over all
    of them, the names included; None for a stage that reads none."""
    data = (manifest.get("identity") or {}).get("data")
    if not isinstance(data, dict) or not data:
        return None
    combined = hashlib.sha256("".join(f"{name}\0{digest}\n" for name, digest in sorted(data.items())).encode())
    return {"files": len(data), "sha256": combined.hexdigest()}


def inputs_text(row: dict[str, Any]) -> str:
    """A lineage row's inputs: the stages it read and the digest of the files it read."""
    parts = [f"{k}={v}" for k, v in row["inputs"].items()]
    if row.get("data"):
        count = row["data"]["files"]
        parts.append(f"{count:,} file{'s' if count != 1 else ''}, sha256 {row['data']['sha256'][:16]}")
    return ", ".join(parts) or "-"


def is_reused(source: RunSource, record: StageRecord) -> bool:
    """Finished before the latest run started: that run skipped it (cache hit)."""
    end = (record.manifest or {}).get("end_time")
    return bool(source.run_started and end and end < source.run_started)


def _unfinished_problem(stage: str, state: str | None) -> dict[str, str]:
    """A stage with an output folder and no manifest: being written now (a live lock),
    or stopped midway; without the engine's lock probe, either."""
    if state == "running":
        return _problem(stage, "running", "being written now by a running driver")
    if state == "interrupted":
        return _problem(stage, "interrupted", "stopped before it finished (run the same command again to resume)")
    return _problem(stage, "incomplete", "started but has no manifest yet: still running, or interrupted "
                                         "(run the same command again to resume)")


def problems(source: RunSource, records: list[StageRecord], tasks: dict[str, dict[str, float]],
             contexts: dict[str, dict[str, dict]] | None = None) -> list[dict[str, str]]:
    """What a reader must know did not happen as planned: skipped, failed, unfinished or
    resumed stages, fine-tuning tasks with no score, scores not above their baseline,
    and T5 tasks whose generations could mostly not be read back."""
    found = []
    for record in records:
        metrics = record.metrics
        if record.state == "failed":
            found.append(_problem(record.stage, "failed", record.error or "failed (no error recorded)"))
        elif record.state == "incomplete":
            found.append(_unfinished_problem(record.stage, source.stage_states.get(record.stage)))
        elif record.state == "not run" and source.stage_states.get(record.stage) == "not selected":
            found.append(_problem(record.stage, "not selected",
                                  "left out of the last run (--only / --from): run it to fill its part"))
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
        limit = ((finetune.manifest or {}).get("config") or {}).get("max_unreadable_fraction",
                                                                     DEFAULT_MAX_UNREADABLE_FRACTION)
        found += [_problem("finetune", "unreadable", line) for line in unreadable_problems(finetune.metrics, limit)]
    if finetune is not None:
        found += [_problem("finetune", "at chance", line) for line in chance_problems(contexts or {})]
    pretrain = source.stage("pretrain")
    mfu = pretrain.metrics.get("mfu") if pretrain else None
    if isinstance(mfu, (int, float)) and mfu > 1:
        peak = ((pretrain.manifest or {}).get("config") or {}).get("peak_tflops")
        found.append(_problem("pretrain", "mfu above 100%", (
            f"MFU {mfu:.0%} is impossible: the peak it was divided by "
            + (f"(pretrain.peak_tflops={peak:g})" if isinstance(peak, (int, float)) else "(the device's table peak)")
            + " is below the device's; set pretrain.peak_tflops to its dense peak TFLOP/s")))
    return found


def evaluation_problems(evaluation: dict[str, dict], snapshot_problem: str | None) -> list[dict[str, str]]:
    """One line for every zero/few-shot score not better than its baseline, and one for a
    snapshots.json that could not be read."""
    found = [_problem("evaluate", "unreliable", line) for line in unreliable_problems(evaluation)]
    if (line := chance_problem(evaluation)) is not None:
        found.append(_problem("evaluate", "at chance", line))
    if snapshot_problem:
        found.append(_problem("evaluate", "unreadable", snapshot_problem))
    return found


def _problem(stage: str, kind: str, message: str) -> dict[str, str]:
    return {"stage": stage, "kind": kind, "message": message}


def format_time(seconds: float | None) -> str:
    if not seconds:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(seconds))
