"""The report's header: the few numbers a reader looks for first, each read from where
the stages recorded it.

    {"val_loss", "val_perplexity", "val_bits_per_byte", "bits_per_byte": [(task, value)], "parameters",
     "tokens_trained", "dataset_tokens", "wall_seconds", "mfu", "best": [(name, text)]}

`bits_per_byte` are the evaluate stage's (text bytes, whatever the tokenizer), which the
validation loss is not: a loss per token depends on the vocabulary; `val_bits_per_byte`
is the validation loss per byte (≈, `stages.report.bits_per_byte`). `best`: the GLUE
average, then the zero/few-shot key scores that beat their baseline most clearly (by
the most interval half-widths; scores of tasks marked unreliable are left out).
"""

from __future__ import annotations

from typing import Any

from stages.report.bits_per_byte import validation_bits_per_byte
from stages.report.curves import Series
from stages.report.evaluation import KEY_METRICS, format_number, verdict_label
from stages.report.numbers import format_count, format_float, format_seconds
from stages.report.sources import RunSource

MAX_BEST = 3


def build_summary(source: RunSource, series: Series, evaluation: dict[str, dict],
                  glue: dict | None) -> dict[str, Any]:
    pretrain = source.stage("pretrain")
    metrics = pretrain.metrics if pretrain else {}
    dataset = source.stage("dataset")
    return {
        "val_loss": _number(metrics.get("val_loss")),
        "val_perplexity": _number(metrics.get("val_perplexity")),
        "val_bits_per_byte": validation_bits_per_byte(source),
        "bits_per_byte": [(task, entry["scores"]["bits_per_byte"]["value"]) for task, entry in evaluation.items()
                          if "bits_per_byte" in entry["scores"]],
        "parameters": _number(metrics.get("num_parameters")),
        "tokens_trained": tokens_trained(pretrain.manifest if pretrain else None, series),
        "dataset_tokens": _number((dataset.metrics if dataset else {}).get("train_tokens")),
        "wall_seconds": sum(s.manifest.get("wall_seconds") or 0.0 for s in source.stages if s.manifest) or None,
        "mfu": _number(metrics.get("mfu")),
        "best": best_scores(evaluation, glue),
    }


def tokens_trained(manifest: dict | None, series: Series) -> int | None:
    """steps x sequences per step x tokens per sequence: the last two from the config the
    stage ran with and from metrics.jsonl (tokens_per_s / samples_per_s is exactly the
    tokens of one sequence, encoder and decoder for span)."""
    if not manifest:
        return None
    steps = _number(manifest.get("metrics", {}).get("steps"))
    config = manifest.get("config") or {}
    per_step = [config.get(k) for k in ("micro_batch_size", "gradient_accumulation_steps", "num_workers")]
    tokens, samples = series.get("tokens_per_s"), series.get("samples_per_s")
    if not (steps and tokens and samples and all(isinstance(v, int) for v in per_step)):
        return None
    per_sample = tokens[-1][1] / samples[-1][1] if samples[-1][1] else None
    if not per_sample:
        return None
    return int(round(steps * per_step[0] * per_step[1] * per_step[2] * per_sample))


def best_scores(evaluation: dict[str, dict], glue: dict | None) -> list[tuple[str, str]]:
    best: list[tuple[str, str]] = []
    if glue:
        best.append(("GLUE average", f"{glue['score']:.4f}"
                     + (f" ({verdict_label(glue)})" if glue.get("verdict") else "")))
    ranked = []
    for task, entry in evaluation.items():
        if entry.get("unreliable"):
            continue
        for metric, score in entry["scores"].items():
            if metric in KEY_METRICS and score["verdict"] == "above" and score["ci95"]:
                # how many interval half-widths clear the baseline: the most clearly better first
                margin = abs(score["value"] - score["baseline"])
                half_width = max((score["ci95"][1] - score["ci95"][0]) / 2, 1e-12)
                ranked.append((margin / half_width, f"{task} {metric}", f"{format_number(score['value'])} "
                               f"(baseline {format_number(score['baseline'])})"))
    ranked.sort(key=lambda item: -item[0])
    return best + [(name, text) for _, name, text in ranked[:MAX_BEST]]


def summary_items(summary: dict[str, Any]) -> list[tuple[str, str]]:
    """(label, value) pairs for both renderers; what the run lacks is left out."""
    items = []
    if summary.get("val_loss") is not None:
        text = format_float(summary["val_loss"])
        if summary.get("val_perplexity") is not None:
            text += f" (perplexity {format_float(summary['val_perplexity'])})"
        items.append(("final validation loss", text))
    if summary.get("val_bits_per_byte") is not None:
        items.append(("validation bits per byte", f"≈ {summary['val_bits_per_byte']:.3f}"))
    for task, value in summary.get("bits_per_byte") or []:
        items.append((f"bits per byte ({task})", f"{value:.3f}"))
    if summary.get("parameters") is not None:
        items.append(("parameters", format_count(summary["parameters"])))
    if summary.get("tokens_trained") is not None:
        text = format_count(summary["tokens_trained"])
        if summary.get("dataset_tokens"):
            text += f" ({summary['tokens_trained'] / summary['dataset_tokens']:.2f} epochs)"
        items.append(("tokens trained", text))
    if summary.get("wall_seconds"):
        items.append(("stage time", format_seconds(summary["wall_seconds"])))
    if summary.get("mfu") is not None:
        items.append(("MFU", f"{summary['mfu']:.1%}"))
    items += [(f"best: {name}", text) for name, text in summary.get("best") or []]
    return items


def _number(value: Any) -> float | int | None:
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None
