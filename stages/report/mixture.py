"""The report's data-mixture table: per source of dataset.mixture, its weight, the share
of training batches it got, its tokens, and its last training and validation loss.

Sources and weights come from the dataset stage's metrics ("mixture"); losses from the
pretraining curves (loss/<source>, val_loss/<source> in metrics.jsonl). A run without a
mixture has no rows, and the renderers leave the section out.
"""

from __future__ import annotations

from typing import Any

from stages.report.curves import Series
from stages.report.html_parts import table
from stages.report.markdown_text import md_text

HEADERS = ["source", "weight", "train tokens", "validation tokens", "train loss", "validation loss"]


def mixture_rows(dataset_metrics: dict[str, Any], series: Series) -> list[dict[str, Any]]:
    """One row per source, in the mixture's order (the dataset stage's metrics), with the
    last logged losses; weights shown normalized (they sum to 1)."""
    parts = dataset_metrics.get("mixture") or {}
    if not isinstance(parts, dict) or not parts:
        return []
    total = sum(float(part.get("weight", 0)) for part in parts.values()) or 1.0
    rows = []
    for name, part in parts.items():
        rows.append({
            "source": name,
            "weight": float(part.get("weight", 0)) / total,
            "train_tokens": part.get("train_tokens"),
            "validation_tokens": part.get("validation_tokens"),
            "loss": _last(series.get(f"loss/{name}")),
            "val_loss": _last(series.get(f"val_loss/{name}")),
        })
    return rows


def _last(points: list[tuple[int, float]] | None) -> float | None:
    return points[-1][1] if points else None


def _cells(row: dict[str, Any]) -> list[str]:
    def number(value: Any, spec: str) -> str:
        return "-" if value is None else format(value, spec)
    return [row["source"], number(row["weight"], ".3f"), number(row["train_tokens"], ","),
            number(row["validation_tokens"], ","), number(row["loss"], ".4f"), number(row["val_loss"], ".4f")]


def mixture_markdown(report: dict[str, Any]) -> list[str]:
    rows = report.get("mixture") or []
    if not rows:
        return []
    out = ["", "## Data mixture", "", "| " + " | ".join(HEADERS) + " |", "|---|" + "---:|" * (len(HEADERS) - 1)]
    out += ["| " + " | ".join(md_text(cell) for cell in _cells(row)) + " |" for row in rows]
    out += ["", "Losses are the last logged (loss/<source>, val_loss/<source>); the validation loss of the "
            "whole run is their mean weighted by the mixture."]
    return out


def mixture_html(report: dict[str, Any]) -> str:
    rows = report.get("mixture") or []
    if not rows:
        return ""
    return "<h2>Data mixture</h2>" + table(HEADERS, [_cells(row) for row in rows], numeric=[1, 2, 3, 4, 5],
                                           css_class="mixture")
