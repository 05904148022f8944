"""Fine-tuning scores as the report shows them: each next to its baseline and 95% interval,
and the GLUE average by the GLUE leaderboard's rules.

Reads the finetune stage's manifest metrics ("task/metric", "task/metric_baseline",
"task/metric_ci95_low", "task/metric_ci95_high"; `stages.finetune.score_context`). A run
fine-tuned before baselines were recorded shows its scores without them.
"""

from __future__ import annotations

import math
import re
from typing import Any

from stages.finetune.score_context import VERDICTS, is_context_key, read_contexts, verdict

GLUE_TASKS = ("cola", "sst2", "mrpc", "stsb", "qqp", "mnli", "mnli_mm", "qnli", "rte", "wnli")
# Each GLUE task's official score (Wang et al. 2019; the leaderboard): the mean of these
# metrics. Tasks not listed: accuracy. MNLI: matched and mismatched accuracy averaged.
GLUE_OFFICIAL = {"cola": ("matthews_corrcoef",), "mrpc": ("f1", "accuracy"), "qqp": ("f1", "accuracy"),
                 "stsb": ("pearson", "spearman")}
GLUE_RULE = ("GLUE's rule: each task's official score (CoLA: MCC; MRPC, QQP: mean of F1 and accuracy; "
             "STS-B: mean of Pearson and Spearman; MNLI: mean of matched and mismatched accuracy; "
             "others: accuracy), then their mean")
# Official scores of GLUE / SQuAD / CoNLL tasks, and of translation and summarization
# (sacreBLEU's bleu and chrf, rouge1/2/L/Lsum); "f1_PER" or "f1/PER" (a CoNLL entity
# type) count as scores too. Counts like "sst2/train_examples" do not.
SCORE = re.compile(r"^(accuracy|f1|matthews(_corrcoef)?|pearson|spearman|exact_match|em|bleu|chrf|rouge(1|2|L|Lsum))"
                   r"([_/].+)?$")
_Z95 = 1.959963984540054  # standard normal quantile of 0.975


def finetune_scores(metrics: dict[str, Any]) -> dict[str, float]:
    """'task/metric' -> score for the official metrics of every task, in stage order
    (a score's baseline and interval keys are not scores)."""
    return {key: float(value) for key, value in metrics.items()
            if "/" in key and SCORE.match(key.split("/", 1)[1]) and not is_context_key(key)
            and isinstance(value, (int, float)) and not isinstance(value, bool)}


def group_by_task(scores: dict[str, float]) -> dict[str, dict[str, float]]:
    tasks: dict[str, dict[str, float]] = {}
    for key, value in scores.items():
        task, metric = key.split("/", 1)
        tasks.setdefault(task, {})[metric] = value
    return tasks


def score_contexts(metrics: dict[str, Any], tasks: dict[str, dict[str, float]]) -> dict[str, dict[str, dict]]:
    """{task: {metric: {"baseline", "ci95", "verdict"}}} for the scores that have them;
    verdict: above | chance | below (`stages.finetune.score_context.verdict`)."""
    found = read_contexts(metrics)
    contexts: dict[str, dict[str, dict]] = {}
    for task, task_scores in tasks.items():
        for metric in task_scores:
            context = found.get(f"{task}/{metric}")
            if context is not None:
                contexts.setdefault(task, {})[metric] = {
                    **context, "verdict": verdict(context["baseline"], context["ci95"])}
    return contexts


def glue_average(tasks: dict[str, dict[str, float]],
                 contexts: dict[str, dict[str, dict]] | None = None) -> dict[str, Any] | None:
    """The GLUE score over the GLUE tasks present (`GLUE_RULE`), with its baseline (the
    same average of the tasks' baselines) and an approximate 95% interval where every
    task has them: each task's standard error read off its metrics' intervals (the
    mean of its metrics' errors: no better than perfectly correlated metrics), tasks
    independent (separate dev sets), normal approximation."""
    contexts = contexts or {}
    per_task: dict[str, tuple[float, float | None, float | None]] = {}  # score, baseline, standard error
    for task in GLUE_TASKS:
        if task == "mnli_mm" and "mnli" in per_task:
            continue
        names = [task, "mnli_mm"] if task == "mnli" and "mnli_mm" in tasks else [task]
        parts = [_official(name, tasks.get(name, {}), contexts.get(name, {})) for name in names]
        parts = [p for p in parts if p is not None]
        if parts:
            per_task[task] = tuple(_mean_or_none(values) for values in zip(*parts))  # type: ignore[assignment]
    if not per_task:
        return None
    scores, baselines, errors = zip(*per_task.values())
    glue: dict[str, Any] = {"score": sum(scores) / len(scores), "tasks": sorted(per_task),
                            "per_task": {task: values[0] for task, values in per_task.items()},
                            "rule": GLUE_RULE, "baseline": None, "ci95": None, "verdict": None}
    if all(b is not None for b in baselines) and all(e is not None for e in errors):
        error = math.sqrt(sum(e * e for e in errors)) / len(errors)
        glue["baseline"] = sum(baselines) / len(baselines)
        glue["ci95"] = [glue["score"] - _Z95 * error, glue["score"] + _Z95 * error]
        glue["verdict"] = verdict(glue["baseline"], glue["ci95"])
    return glue


def _official(task: str, metrics: dict[str, float], contexts: dict[str, dict],
              ) -> tuple[float, float | None, float | None] | None:
    """(score, baseline, standard error) of one task by its official rule."""
    wanted = GLUE_OFFICIAL.get(task, ("accuracy",))
    if task == "cola" and "matthews_corrcoef" not in metrics:
        wanted = ("matthews",)  # older runs' name
    names = [m for m in wanted if m in metrics]
    if len(names) != len(wanted):
        return None  # the official metric is missing: averaging another one would mislead
    score = sum(metrics[m] for m in names) / len(names)
    if not all(m in contexts for m in names):
        return score, None, None
    baseline = sum(contexts[m]["baseline"] for m in names) / len(names)
    error = sum((contexts[m]["ci95"][1] - contexts[m]["ci95"][0]) / (2 * _Z95) for m in names) / len(names)
    return score, baseline, error


def _mean_or_none(values) -> float | None:
    values = list(values)
    return None if any(v is None for v in values) else sum(values) / len(values)


def chance_problems(contexts: dict[str, dict[str, dict]]) -> list[str]:
    """One line per task with scores that are not above their baseline."""
    lines = []
    for task, metrics in contexts.items():
        weak = [f"{metric} (baseline {c['baseline']:.4f}, 95% CI {c['ci95'][0]:.4f}-{c['ci95'][1]:.4f})"
                for metric, c in metrics.items() if c["verdict"] != "above"]
        if weak:
            lines.append(f"task {task}: not above what ignoring the input scores: {', '.join(weak)}")
    return lines


def unreadable_problems(metrics: dict[str, Any], max_fraction: float) -> list[str]:
    """One line per T5 task whose share of unreadable dev generations passes the limit."""
    lines = []
    for key, value in metrics.items():
        if key.endswith("/unreadable_fraction") and isinstance(value, (int, float)) and value > max_fraction:
            task = key.split("/", 1)[0]
            count = metrics.get(f"{task}/unreadable_predictions")
            count_text = f"{int(count)} dev generations" if isinstance(count, (int, float)) else "dev generations"
            lines.append(f"task {task}: {count_text} ({value:.0%}) could not be read back as an answer and "
                         f"were scored as wrong (over finetune.max_unreadable_fraction={max_fraction}); "
                         "see the task's metrics.json warnings")
    return lines


BASELINE_LEGEND = ("baseline: what a model that ignores its input scores (majority class for accuracy, "
                   "always predicting class 1 for F1, 0 for MCC and correlations, answering nothing for "
                   "SQuAD, the best single tag for CoNLL; each task's metrics.json says how, under "
                   "score_notes). 95% CI: Wilson for accuracy and exact match, bootstrap over examples "
                   "otherwise. ≈ chance: the interval includes the baseline")


def context_cells(context: dict | None) -> tuple[str, str, str]:
    """(interval, baseline, verdict) as table text; "-" where the run has none."""
    if not context:
        return "-", "-", "-"
    low, high = context["ci95"]
    return f"{low:.4f} – {high:.4f}", f"{context['baseline']:.4f}", VERDICTS[context["verdict"]]
