"""Training curves from a stage's `metrics.jsonl`: one series per metric, one point per step.

After a resume, the steps between the last checkpoint and the crash are logged twice;
the later record is the one the finished run stands on, so the last record per step
wins. Fine-tuning records carry a `task` key and are grouped by it.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

METRICS_FILE = "metrics.jsonl"
# Metric name -> the panel it is drawn in. Any other "*loss" key is a training loss
# (e.g. mlm_loss, nsp_loss for objectives with several heads).
THROUGHPUT_KEYS = ("tokens_per_s", "examples_per_s")
LR_KEYS = ("lr",)

Series = dict[str, list[tuple[int, float]]]  # metric -> [(step, value)] sorted by step


def read_records(directory: Path | None) -> list[dict[str, Any]]:
    """Every JSON record of `directory/metrics.jsonl`; a torn last line (a run killed
    mid-write, or a file still being written) is ignored."""
    if directory is None or not (Path(directory) / METRICS_FILE).is_file():
        return []
    records = []
    with open(Path(directory) / METRICS_FILE, encoding="utf-8") as f:
        for line in f:
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(record, dict):
                records.append(record)
    return records


def series_by_metric(records: list[dict[str, Any]]) -> Series:
    """metric -> [(step, value)], deduplicated by step (the last record per step wins)."""
    latest: dict[str, dict[int, float]] = {}
    for record in records:
        step = record.get("step")
        if not isinstance(step, int):
            continue
        for key, value in record.items():
            if key in ("step", "time", "epoch", "task") or not _is_number(value):
                continue
            latest.setdefault(key, {})[step] = float(value)
    return {key: sorted(points.items()) for key, points in sorted(latest.items())}


def pretrain_series(directory: Path | None) -> Series:
    return series_by_metric([r for r in read_records(directory) if "task" not in r])


def finetune_series(directory: Path | None) -> dict[str, Series]:
    """task -> its series (train loss, lr, throughput per step)."""
    by_task: dict[str, list[dict]] = {}
    for record in read_records(directory):
        if "task" in record:
            by_task.setdefault(str(record["task"]), []).append(record)
    return {task: series for task, records in sorted(by_task.items())
            if (series := series_by_metric(records))}


def panels(series: Series) -> dict[str, Series]:
    """Group a run's series into the plots a reader wants: training loss, validation
    loss, learning rate, throughput. Panels with no data are left out, and so are loss
    components that repeat their total (`without_repeated_parts`)."""
    grouped: dict[str, Series] = {"Training loss": {}, "Validation loss": {},
                                  "Loss per data source": {}, "Learning rate": {}, "Throughput": {}}
    for key, points in without_repeated_parts(series).items():
        if key.startswith(("loss/", "val_loss/")):  # dataset.mixture: one line per source
            grouped["Loss per data source"][key] = points
        elif key.startswith("val_") and key.endswith("loss"):
            grouped["Validation loss"][key] = points
        elif key.endswith("loss"):
            grouped["Training loss"][key] = points
        elif key in LR_KEYS:
            grouped["Learning rate"][key] = points
        elif key in THROUGHPUT_KEYS:
            grouped["Throughput"][key] = points
    return {title: group for title, group in grouped.items() if group}


def without_repeated_parts(series: Series) -> Series:
    """The series less each `<part>_loss` (`val_<part>_loss`) that equals its total `loss`
    (`val_loss`) at every step: a GPT's loss is its clm_loss, and two identical lines
    drawn over each other read as one line hidden or as two that happen to agree. Parts
    of a loss with several (mlm + nsp) differ from their sum and stay."""
    kept = dict(series)
    for prefix in ("", "val_"):
        total = series.get(f"{prefix}loss")
        if not total:
            continue
        parts = [key for key in series if key.startswith(prefix) and key.endswith("_loss")
                 and key != f"{prefix}loss" and "/" not in key
                 and (prefix or not key.startswith("val_"))]
        for key in parts:
            if _same_points(series[key], total):
                del kept[key]
    return kept


def _same_points(a: list[tuple[int, float]], b: list[tuple[int, float]]) -> bool:
    return len(a) == len(b) and all(
        step_a == step_b and math.isclose(value_a, value_b, rel_tol=1e-6, abs_tol=1e-9)
        for (step_a, value_a), (step_b, value_b) in zip(a, b))


def sample_curve(series: Series, points: int) -> list[dict[str, Any]]:
    """A few evenly spaced (step, loss, val_loss) rows of the pretraining curve, always
    including the last step (the table in report.md)."""
    train = series.get("loss", [])
    if not train:
        return []
    stride = max(1, len(train) // points)
    picked = train[::stride] + ([train[-1]] if (len(train) - 1) % stride else [])
    val = dict(series.get("val_loss", []))
    return [{"step": step, "loss": loss, "val_loss": val.get(step)} for step, loss in picked]


def _is_number(value: Any) -> bool:
    # NaN/inf (a diverged step) cannot be plotted or compared; they are left out.
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
