"""Each score's baseline and 95% interval, as flat numbers next to the score itself.

A task's metrics.json holds, for every score it reports (`accuracy`, `f1`, ...):

    "accuracy": 0.5092,
    "accuracy_baseline": 0.5092,      what a model that ignores its input scores
    "accuracy_ci95_low": 0.4760,      95% interval of the score over the scored examples
    "accuracy_ci95_high": 0.5424,
    "score_notes": {"accuracy": "baseline: majority class (always 1); 95% CI: Wilson ..."}

Flat numbers, so they reach the stage's manifest summary like every other metric
("sst2/accuracy_baseline") and any reader of a run sees them; `read_contexts` turns them
back into {metric: {"baseline", "ci95"}} and `verdict` says whether the score is above
its baseline. Baselines: `stages.finetune.baselines`; intervals: `stages.finetune.intervals`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

BASELINE = "_baseline"
CI_LOW = "_ci95_low"
CI_HIGH = "_ci95_high"
SUFFIXES = (BASELINE, CI_LOW, CI_HIGH)
NOTES_KEY = "score_notes"
VERDICTS = {"above": "above baseline", "chance": "≈ chance", "below": "below baseline"}


@dataclass(frozen=True)
class ScoreContext:
    baseline: float
    ci95: tuple[float, float]
    note: str  # how the baseline and the interval were found


def as_metrics(contexts: dict[str, ScoreContext]) -> dict[str, Any]:
    """The flat keys for metrics.json, and the notes under `score_notes`."""
    flat: dict[str, Any] = {}
    for metric, context in contexts.items():
        flat.update({metric + BASELINE: context.baseline,
                     metric + CI_LOW: context.ci95[0], metric + CI_HIGH: context.ci95[1]})
    flat[NOTES_KEY] = {metric: context.note for metric, context in contexts.items()}
    return flat


def proportion_context(successes: np.ndarray, baseline: float, baseline_rule: str) -> ScoreContext:
    """A score that is the mean of 0/1 outcomes (accuracy, exact match)."""
    from stages.finetune.intervals import proportion_ci95

    successes = np.asarray(successes)
    return ScoreContext(float(baseline), proportion_ci95(int(successes.sum()), len(successes)),
                        f"baseline: {baseline_rule}; 95% CI: Wilson score interval over {len(successes)} examples")


def resampled_context(statistic: Callable, arrays: tuple, baseline: float, baseline_rule: str, *,
                      seed: int) -> ScoreContext:
    """Any other score: a percentile bootstrap over examples."""
    from stages.finetune.intervals import NUM_RESAMPLES, bootstrap_ci95

    return ScoreContext(float(baseline), bootstrap_ci95(statistic, *arrays, seed=seed),
                        f"baseline: {baseline_rule}; 95% CI: percentile bootstrap over {len(arrays[0])} "
                        f"examples ({NUM_RESAMPLES} resamples, seed {seed})")


def glue_contexts(metrics: tuple[str, ...], predictions: np.ndarray, labels: np.ndarray, *,
                  seed: int) -> dict[str, ScoreContext]:
    """GLUE metrics of predicted class ids (-1: unreadable, scored wrong) or regression
    scores against the scored split's gold labels."""
    from stages.finetune.baselines import metric_baseline
    from stages.finetune.intervals import STATISTICS

    predictions, labels = np.asarray(predictions), np.asarray(labels)
    contexts = {}
    for metric in metrics:
        baseline, rule = metric_baseline(metric, labels)
        if metric == "accuracy":
            contexts[metric] = proportion_context(predictions == labels, baseline, rule)
        else:
            contexts[metric] = resampled_context(STATISTICS[metric], (predictions, labels), baseline, rule, seed=seed)
    return contexts


def is_context_key(key: str) -> bool:
    return key.endswith(SUFFIXES)


def read_contexts(metrics: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """{"accuracy": {"baseline": 0.509, "ci95": [0.476, 0.542]}} from the flat keys (with
    any prefix, e.g. "sst2/accuracy"); a metric without all three keys is left out."""
    found: dict[str, dict[str, Any]] = {}
    for key in metrics:
        if not key.endswith(BASELINE):
            continue
        metric = key[:-len(BASELINE)]
        low, high = metrics.get(metric + CI_LOW), metrics.get(metric + CI_HIGH)
        if _is_number(metrics[key]) and _is_number(low) and _is_number(high):
            found[metric] = {"baseline": float(metrics[key]), "ci95": [float(low), float(high)]}
    return found


def verdict(baseline: float, ci95) -> str:
    """"above" when the whole interval lies above the baseline, "below" when under it,
    else "chance": the score cannot be told apart from what ignoring the input gets."""
    low, high = ci95
    if low > baseline:
        return "above"
    if high < baseline:
        return "below"
    return "chance"


def describe(value: float, context: dict[str, Any] | None) -> str:
    """"0.5092 [0.4760, 0.5424] baseline 0.5092 ≈ chance" (a score alone without context)."""
    if context is None:
        return f"{value:.4f}"
    low, high = context["ci95"]
    return (f"{value:.4f} [{low:.4f}, {high:.4f}] baseline {context['baseline']:.4f} "
            f"{VERDICTS[verdict(context['baseline'], context['ci95'])]}")


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
