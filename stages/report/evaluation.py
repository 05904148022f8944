"""The evaluate stage's zero- and few-shot scores as the report shows them: each next to
its baseline and 95% interval, with a verdict that knows which way is better.

Reads `<evaluate dir>/results.json` (stages/evaluate/run.py):

    {"piqa": {"task": "piqa", "kind": "multiple_choice", "shots": 0, "seed": 1234,
              "num_examples": 200, "num_truncated": 0, "num_skipped": 0,
              "scores": {"acc": {"value": 0.53, "ci95": [0.46, 0.60], "baseline": 0.5,
                                 "baseline_kind": "chance: mean of 1/n choices",
                                 "higher_is_better": true}}}}

and, where results.json is missing, the same scores from the stage's flat manifest
metrics ("piqa/acc", "piqa/acc_baseline", "piqa/acc_ci95_low", ..., "piqa/num_examples";
no shots or kind there, and which way is better is told by the metric's name).

Across training, `<evaluate dir>/snapshots.json` (when the stage scored pretraining
snapshots, stages/evaluate/snapshots.py): a list of
{"step", "tokens", "task", "metric", "value", "ci95", "baseline", "higher_is_better"}.

A verdict here is "above" when the whole interval lies on the better side of the
baseline (above it for accuracy, below it for perplexity and bits per byte; the evaluate
stage's `clears_baseline`), "below" when it lies wholly on the worse side, "chance" when
it holds the baseline, None without a baseline or an interval. The keys are those of
fine-tuning verdicts, so badges and comparison marks are shared; `verdict_label` words
them for the score's direction.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from stages.finetune.score_context import BASELINE, CI_HIGH, CI_LOW, VERDICTS, verdict
from stages.report.sources import StageRecord

RESULTS_FILE = "results.json"
SNAPSHOTS_FILE = "snapshots.json"
COUNT_KEYS = ("num_examples", "num_truncated", "num_skipped")
# The scores `pretrain status` and the stages table show (the others stay in the section).
KEY_METRICS = ("acc", "acc_norm", "perplexity", "word_perplexity", "bits_per_byte", "exact_match", "f1",
               "bleu", "chrf", "rougeL")
# A task whose prompts were cut from the left this often is marked unreliable.
MAX_TRUNCATED_FRACTION = 0.2
LOWER_VERDICTS = {"above": "better than baseline", "chance": "≈ chance", "below": "worse than baseline"}
EVALUATION_LEGEND = (
    "baseline: what ignoring the input scores (chance, 1/n choices, for multiple choice; the "
    "majority class where the choices are fixed labels, as GLUE and BoolQ; 0 for exact match, "
    "F1 and LAMBADA accuracy; 8 bits per byte and byte perplexity 256 for a uniform model over "
    "bytes; token and word perplexity have none, they depend on the vocabulary; results.json's "
    "baseline_kind, shown on hovering a baseline in report.html, says how each was found). 95% CI: Wilson for accuracy and exact match, bootstrap over examples "
    "(documents for perplexity) otherwise. Perplexity and bits per byte: lower is better. "
    "≈ chance: the interval includes the baseline")


def is_lower_better(metric: str) -> bool:
    """Which way a score is better when results.json does not say (manifest metrics)."""
    return "perplexity" in metric or metric == "bits_per_byte"


def judge(baseline: float | None, ci95, higher_is_better: bool, value: float | None = None) -> str | None:
    """above (better side) | chance | below (worse side) | None (nothing to judge by).
    Without an interval (a perplexity over one document: nothing to resample) the value
    itself is judged against the baseline; `no_interval_note` says so beside it."""
    if baseline is None or (ci95 is None and value is None):
        return None
    side = verdict(baseline, ci95 if ci95 is not None else [value, value])
    return side if higher_is_better else {"above": "below", "below": "above", "chance": "chance"}[side]


def no_interval_note(score: dict[str, Any], num_examples: int | None) -> str | None:
    """Why a verdict stands on the value alone, or None where an interval backs it."""
    if score.get("ci95") is not None or score.get("baseline") is None:
        return None
    return "no interval: one document" if num_examples == 1 else "no interval"


def truncation_problem(entry: dict[str, Any]) -> str | None:
    """Why a task's scores are unreliable: more than MAX_TRUNCATED_FRACTION of its prompts
    were cut from the left to fit the context (the model never saw their start); else None."""
    examples, truncated = entry.get("num_examples"), entry.get("num_truncated") or 0
    if not examples or truncated / examples <= MAX_TRUNCATED_FRACTION:
        return None
    return (f"{truncated} of {examples} prompts ({truncated / examples:.0%}) were cut from the left to fit "
            "the model's context: the scores measure truncated prompts")


def verdict_label(context: dict) -> str:
    """The verdict in words; fine-tuning contexts (no `higher_is_better`) read as scores."""
    label = (VERDICTS if context.get("higher_is_better", True) else LOWER_VERDICTS)[context["verdict"]]
    return label + (f" ({context['no_interval']})" if context.get("no_interval") else "")


def read_evaluation(record: StageRecord | None) -> dict[str, dict[str, Any]]:
    """{task: {kind, shots, num_examples, num_truncated, scores: {metric: {value, ci95,
    baseline, baseline_kind, higher_is_better, verdict}}}}, tasks in the stage's order."""
    if record is None or record.state != "done":
        return {}
    results = _read_json(record.directory, RESULTS_FILE)
    if isinstance(results, dict) and results:
        return {task: _task_entry(task, entry) for task, entry in results.items() if isinstance(entry, dict)}
    return scores_from_metrics(record.metrics)


def _task_entry(task: str, entry: dict) -> dict[str, Any]:
    scores = {}
    for metric, score in (entry.get("scores") or {}).items():
        if not isinstance(score, dict) or not _is_number(score.get("value")):
            continue
        higher = bool(score.get("higher_is_better", not is_lower_better(metric)))
        ci95 = _interval(score.get("ci95"))
        baseline = float(score["baseline"]) if _is_number(score.get("baseline")) else None
        value = float(score["value"])
        scores[metric] = {"value": value, "ci95": ci95, "baseline": baseline,
                          "baseline_kind": score.get("baseline_kind"), "higher_is_better": higher,
                          "verdict": judge(baseline, ci95, higher, value)}
        scores[metric]["no_interval"] = no_interval_note(scores[metric], entry.get("num_examples"))
    task_entry = {"task": task, "kind": entry.get("kind"), "shots": entry.get("shots"),
                  "num_examples": entry.get("num_examples"), "num_truncated": entry.get("num_truncated") or 0,
                  "num_skipped": entry.get("num_skipped") or 0, "scores": scores}
    task_entry["unreliable"] = truncation_problem(task_entry)
    return task_entry


def scores_from_metrics(metrics: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The same shape from flat manifest metrics (kind, shots and baseline_kind unknown)."""
    tasks: dict[str, dict[str, Any]] = {}
    for key, value in metrics.items():
        if "/" not in key or not _is_number(value) or key.endswith((BASELINE, CI_LOW, CI_HIGH)):
            continue
        task, metric = key.split("/", 1)
        entry = tasks.setdefault(task, {"task": task, "kind": None, "shots": None, "num_examples": None,
                                        "num_truncated": 0, "num_skipped": 0, "scores": {}})
        if metric in COUNT_KEYS:
            entry[metric] = int(value)
            continue
        low, high, baseline = (metrics.get(key + suffix) for suffix in (CI_LOW, CI_HIGH, BASELINE))
        ci95 = [float(low), float(high)] if _is_number(low) and _is_number(high) else None
        baseline = float(baseline) if _is_number(baseline) else None
        higher = not is_lower_better(metric)
        entry["scores"][metric] = {"value": float(value), "ci95": ci95, "baseline": baseline,
                                   "baseline_kind": None, "higher_is_better": higher,
                                   "verdict": judge(baseline, ci95, higher, float(value))}
    for entry in tasks.values():  # the counts may come after the scores
        for score in entry["scores"].values():
            score["no_interval"] = no_interval_note(score, entry["num_examples"])
        entry["unreliable"] = truncation_problem(entry)
    return {task: entry for task, entry in tasks.items() if entry["scores"]}


def key_scores(metrics: dict[str, Any]) -> dict[str, str]:
    """"task/metric" -> "0.5300 [0.4600, 0.6000] baseline 0.5000 ≈ chance" for KEY_METRICS,
    from an evaluate manifest's metrics (`pretrain status`, the stages table)."""
    return {f"{task}/{metric}": describe_score(score)
            for task, entry in scores_from_metrics(metrics).items()
            for metric, score in entry["scores"].items() if metric in KEY_METRICS}


def describe_score(score: dict[str, Any]) -> str:
    text = format_number(score["value"])
    if score["ci95"]:
        text += f" [{format_number(score['ci95'][0])}, {format_number(score['ci95'][1])}]"
    if score["baseline"] is not None:
        text += f" baseline {format_number(score['baseline'])}"
    if score["verdict"]:
        text += f" {verdict_label(score)}"
    return text


def chance_problem(evaluation: dict[str, dict[str, Any]]) -> str | None:
    """One line naming every score that is not better than its baseline (None if all are);
    the scores of an unreliable task (`truncation_problem`) have their own line."""
    judged = [(f"{task}/{metric}", score) for task, entry in evaluation.items() if not entry.get("unreliable")
              for metric, score in entry["scores"].items() if score["verdict"]]
    weak = [f"{name} ({verdict_label(score)})" for name, score in judged if score["verdict"] != "above"]
    if not weak:
        return None
    return (f"{len(weak)} of {len(judged)} zero/few-shot scores are not better than their baseline: "
            + ", ".join(weak))


def unreliable_problems(evaluation: dict[str, dict[str, Any]]) -> list[str]:
    """One line per task whose scores are unreliable, with the reason."""
    return [f"{task}: scores unreliable: {entry['unreliable']} (raise evaluate.max_length or use fewer shots)"
            for task, entry in evaluation.items() if entry.get("unreliable")]


def read_snapshots(record: StageRecord | None) -> tuple[list[dict[str, Any]], str | None]:
    """(rows of snapshots.json in step order, a problem to report or None). Rows that
    lack a number where one belongs are left out (and counted in the problem)."""
    if record is None or record.state != "done" or record.directory is None:
        return [], None
    path = Path(record.directory) / SNAPSHOTS_FILE
    if not path.is_file():
        return [], None
    try:
        loaded = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        return [], f"{path} could not be read ({error}); the scores across training are not shown"
    if not isinstance(loaded, list):
        return [], f"{path} holds {type(loaded).__name__}, not a list of snapshot scores; not shown"
    rows, skipped = [], 0
    for row in loaded:
        if not (isinstance(row, dict) and all(_is_number(row.get(k)) for k in ("step", "tokens", "value"))
                and isinstance(row.get("task"), str) and isinstance(row.get("metric"), str)):
            skipped += 1
            continue
        higher = bool(row.get("higher_is_better", not is_lower_better(row["metric"])))
        baseline = float(row["baseline"]) if _is_number(row.get("baseline")) else None
        ci95 = _interval(row.get("ci95"))
        rows.append({"step": int(row["step"]), "tokens": int(row["tokens"]), "task": row["task"],
                     "metric": row["metric"], "value": float(row["value"]), "ci95": ci95,
                     "baseline": baseline, "higher_is_better": higher,
                     "verdict": judge(baseline, ci95, higher, float(row["value"]))})
    rows.sort(key=lambda r: r["step"])  # stable: tasks keep the file's order within a step
    problem = (f"{path}: {skipped} of {len(loaded)} rows lack step, tokens, task, metric or value "
               "and are not shown") if skipped else None
    return rows, problem


def snapshot_axis(metric: str, higher_is_better: bool) -> str:
    """Which kind of scale a score has: scores, perplexity (log) or bits per byte (the
    scaling section's downstream plots)."""
    if higher_is_better:
        return "scores"
    return "perplexity" if "perplexity" in metric else "bits per byte"


def snapshot_panel(task: str, metric: str, higher_is_better: bool, kind: str | None) -> str:
    """Which plot a score across training goes in: scores (higher is better) one per task
    family, where they share a 0-1 scale; bits per byte of every task on one (0-8); each
    task's perplexities on their own log axis (a barely trained model's 1e9 next to
    another task's 10 would flatten both)."""
    if higher_is_better:
        return (kind or "scores").replace("_", " ")
    if metric == "bits_per_byte":
        return "bits per byte"
    return f"{task} perplexity"


def snapshot_lines(rows: list[dict[str, Any]], kinds: dict[str, str | None] | None = None
                   ) -> dict[str, dict[str, dict[str, Any]]]:
    """panel (`snapshot_panel`; `kinds`: task -> its kind from results.json) -> "task
    metric" -> {"points": [(tokens, value)], "bands": [(tokens, low, high)], "baseline": the
    latest baseline or None, "higher_is_better"}, for plotting. A task's byte perplexity
    is left out where its bits per byte is drawn (the same number, 2 ** bits)."""
    kinds = kinds or {}
    with_bits = {row["task"] for row in rows if row["metric"] == "bits_per_byte"}
    panels: dict[str, dict[str, dict[str, Any]]] = {}
    for row in rows:
        if row["metric"] == "byte_perplexity" and row["task"] in with_bits:
            continue
        panel = snapshot_panel(row["task"], row["metric"], row["higher_is_better"], kinds.get(row["task"]))
        line = panels.setdefault(panel, {}).setdefault(
            f"{row['task']} {row['metric']}",
            {"points": [], "bands": [], "baseline": None, "higher_is_better": row["higher_is_better"]})
        line["points"].append((row["tokens"], row["value"]))
        if row["ci95"]:
            line["bands"].append((row["tokens"], *row["ci95"]))
        if row["baseline"] is not None:
            line["baseline"] = row["baseline"]
    # scores first, then bits per byte, then each task's perplexities
    def order(item):
        lines = item[1]
        higher = next(iter(lines.values()))["higher_is_better"]
        return (0 if higher else 1 if item[0] == "bits per byte" else 2)
    return dict(sorted(panels.items(), key=order))


def format_number(value: float) -> str:
    """Four decimals for scores and small perplexities, one for large perplexities, and
    an exponent for the astronomical ones of a barely trained model."""
    if abs(value) < 100:
        return f"{value:.4f}"
    return f"{value:.1f}" if abs(value) < 1e6 else f"{value:.3e}"


def _interval(value) -> list[float] | None:
    if isinstance(value, (list, tuple)) and len(value) == 2 and all(_is_number(v) for v in value):
        return [float(value[0]), float(value[1])]
    return None


def _read_json(directory: Path | None, name: str) -> Any:
    if directory is None:
        return None
    try:
        return json.loads((Path(directory) / name).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _is_number(value: Any) -> bool:
    return (isinstance(value, (int, float)) and not isinstance(value, bool)
            and math.isfinite(value))
