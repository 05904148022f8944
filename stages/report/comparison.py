"""Several runs side by side: config differences, curves overlaid, scores with deltas.

The first run is the baseline; every delta is `run - baseline`. Whether a delta is
better depends on the metric: losses go down, scores go up.
"""

from __future__ import annotations

import time
from typing import Any

from stages.report.content import build_report
from stages.report.curves import Series, finetune_series, panels, pretrain_series
from stages.report.sources import RunSource

# Keys that always differ between runs and say nothing about the experiment.
IGNORED_CONFIG_KEYS = ("name", "workdir")
PRETRAIN_SUMMARY = ("steps", "final_loss", "val_loss", "val_perplexity", "tokens_per_second")


def run_labels(sources: list[RunSource]) -> list[str]:
    """A unique, short label per run: its experiment name, else its directory name."""
    labels: list[str] = []
    for i, source in enumerate(sources):
        label = source.name
        if label in labels and source.run_dir is not None:
            label = source.run_dir.name
        if label in labels:
            label = f"{label}#{i + 1}"
        labels.append(label)
    return labels


def build_comparison(sources: list[RunSource]) -> dict[str, Any]:
    labels = run_labels(sources)
    reports = [build_report(s) for s in sources]
    return {
        "runs": [{"label": label, "experiment": s.name, "run_dir": str(s.run_dir or ""),
                  "stages": {row["stage"]: row["state"] for row in r["stages"]}}
                 for label, s, r in zip(labels, sources, reports)],
        "generated": time.time(),
        "config_differences": config_differences([s.config for s in sources]),
        "metrics": metric_rows(labels, sources, reports),
    }


def flatten(config: Any, prefix: str = "") -> dict[str, Any]:
    """{'pretrain.lr': 0.001, 'finetune.tasks': ['sst2'], ...}: lists stay values."""
    if not isinstance(config, dict):
        return {prefix: config}
    flat: dict[str, Any] = {}
    for key, value in config.items():
        flat.update(flatten(value, f"{prefix}.{key}" if prefix else str(key)))
    return flat


def config_differences(configs: list[dict]) -> list[dict[str, Any]]:
    """[{key, values: [per run]}] for every key whose value is not the same in all runs
    (a key missing from a run shows as None)."""
    flats = [flatten(c) for c in configs]
    keys = sorted(set().union(*flats)) if flats else []
    rows = []
    for key in keys:
        if key in IGNORED_CONFIG_KEYS:
            continue
        values = [flat.get(key) for flat in flats]
        if any(v != values[0] for v in values[1:]):
            rows.append({"key": key, "values": values})
    return rows


def metric_rows(labels: list[str], sources: list[RunSource], reports: list[dict]) -> list[dict]:
    """[{group, metric, values, deltas, lower_is_better}]: pretraining summary and every
    fine-tuning score any run has, with deltas against the first run."""
    rows = []
    for metric in PRETRAIN_SUMMARY:
        values = [_pretrain_metric(s, metric) for s in sources]
        if any(v is not None for v in values):
            rows.append(_row("pretrain", metric, values, lower_is_better=metric != "tokens_per_second"
                             and metric != "steps"))
    score_keys: list[str] = []
    for report in reports:
        score_keys += [k for k in report["finetune"] if k not in score_keys]
    for key in score_keys:
        task, metric = key.split("/", 1)
        rows.append(_row(task, metric, [r["finetune"].get(key) for r in reports], lower_is_better=False))
    glue = [r["glue_average"]["score"] if r.get("glue_average") else None for r in reports]
    if any(v is not None for v in glue):
        rows.append(_row("GLUE", "average", glue, lower_is_better=False))
    return rows


def _row(group: str, metric: str, values: list, *, lower_is_better: bool) -> dict[str, Any]:
    base = values[0]
    deltas = [None if (v is None or base is None) else v - base for v in values]
    return {"group": group, "metric": metric, "values": values, "deltas": deltas,
            "lower_is_better": lower_is_better}


def _pretrain_metric(source: RunSource, metric: str) -> float | None:
    record = source.stage("pretrain")
    value = record.metrics.get(metric) if record else None
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def overlaid_panels(sources: list[RunSource]) -> dict[str, Series]:
    """Panel title -> {line label: points}: the same panels as a single report, with
    one line per run (and per metric, where a panel holds several)."""
    labels = run_labels(sources)
    overlaid: dict[str, Series] = {}
    for label, source in zip(labels, sources):
        pretrain = source.stage("pretrain")
        for title, lines in panels(pretrain_series(pretrain.directory if pretrain else None)).items():
            for key, points in lines.items():
                line = label if len(lines) == 1 else f"{label}: {key}"
                overlaid.setdefault(f"Pretraining: {title.lower()}", {})[line] = points
        finetune = source.stage("finetune")
        for task, series in finetune_series(finetune.directory if finetune else None).items():
            if "loss" in series:
                overlaid.setdefault(f"Fine-tuning loss: {task}", {})[label] = series["loss"]
    return overlaid
