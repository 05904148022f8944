"""The report stage: `report.md` and `metrics.json` from the upstream manifests.

One row per stage (state, fingerprint, wall time, key metrics), then the fine-tuning
scores and the pretraining curve in brief. Reads only manifests and metrics.jsonl files,
so it runs in the driver in well under a second.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pipeline.context import StageContext

FINETUNE_SCORES = ("accuracy", "f1", "matthews", "pearson", "spearman", "exact_match")


def run(ctx: "StageContext") -> dict:
    stages = [_stage_row(name, manifest) for name, manifest in ctx.input_manifests.items()]
    scores = _finetune_scores(ctx.input_manifests.get("finetune") or {})
    curve = _curve(ctx.inputs.get("pretrain"), ctx.config.curve_points)
    report = {
        "experiment": ctx.experiment.name, "generated": time.time(), "stages": stages,
        "finetune": scores, "pretrain_curve": curve,
    }
    (ctx.output_dir / "metrics.json").write_text(json.dumps(report, indent=2, default=str) + "\n")
    (ctx.output_dir / "report.md").write_text(render_markdown(report))
    return {"stages_reported": len(stages), **{f"finetune/{k}": v for k, v in scores.items()}}


def _stage_row(name: str, manifest: dict | None) -> dict:
    if not manifest:
        return {"stage": name, "state": "missing", "fingerprint": "", "seconds": None, "metrics": {}}
    metrics = {k: v for k, v in manifest.get("metrics", {}).items() if isinstance(v, (int, float, str))}
    return {"stage": name, "state": "done", "fingerprint": manifest.get("fingerprint", ""),
            "seconds": manifest.get("wall_seconds"), "metrics": metrics}


def _finetune_scores(manifest: dict) -> dict[str, float]:
    """'task/metric' -> value for the official score metrics of every task."""
    return {k: v for k, v in manifest.get("metrics", {}).items()
            if "/" in k and k.rsplit("/", 1)[1] in FINETUNE_SCORES}


def _curve(pretrain_dir: Path | None, points: int = 10) -> list[dict[str, Any]]:
    """A few evenly spaced (step, loss, val_loss) points of the training curve."""
    if pretrain_dir is None or not (Path(pretrain_dir) / "metrics.jsonl").is_file():
        return []
    with open(Path(pretrain_dir) / "metrics.jsonl", encoding="utf-8") as f:
        records = [json.loads(line) for line in f if line.strip()]
    # After a resume the steps between the last checkpoint and the crash are logged
    # twice; the later record is the one the finished run stands on.
    latest = {r["step"]: r for r in records if "loss" in r and "step" in r}
    train = [latest[step] for step in sorted(latest)]
    if not train:
        return []
    stride = max(1, len(train) // points)
    picked = train[::stride] + ([train[-1]] if (len(train) - 1) % stride else [])
    val = {r["step"]: r["val_loss"] for r in records if "val_loss" in r and "step" in r}
    return [{"step": r["step"], "loss": r["loss"], "val_loss": val.get(r["step"])} for r in picked]


def render_markdown(report: dict) -> str:
    out = [f"# Experiment `{report['experiment']}`", "",
           f"Generated {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(report['generated']))}.", "",
           "## Stages", "", "| stage | state | fingerprint | seconds | key metrics |",
           "|---|---|---|---:|---|"]
    for row in report["stages"]:
        seconds = f"{row['seconds']:.1f}" if row["seconds"] is not None else "-"
        out.append(f"| {row['stage']} | {row['state']} | `{row['fingerprint']}` | {seconds} | "
                   f"{_format_metrics(row['metrics'])} |")
    out += ["", "## Fine-tuning", ""]
    if report["finetune"]:
        out += ["| task | metric | value |", "|---|---|---:|"]
        for key, value in report["finetune"].items():
            task, metric = key.rsplit("/", 1)
            out.append(f"| {task} | {metric} | {value:.4f} |")
    else:
        out.append("No fine-tuning scores.")
    out += ["", "## Pretraining curve", ""]
    if report["pretrain_curve"]:
        out += ["| step | train loss | validation loss |", "|---:|---:|---:|"]
        for p in report["pretrain_curve"]:
            val = f"{p['val_loss']:.4f}" if p["val_loss"] is not None else "-"
            out.append(f"| {p['step']} | {p['loss']:.4f} | {val} |")
    else:
        out.append("No training metrics found.")
    return "\n".join(out) + "\n"


def _format_metrics(metrics: dict, limit: int = 6) -> str:
    items = list(metrics.items())[:limit]
    return ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in items)
