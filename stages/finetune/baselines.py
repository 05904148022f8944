"""What a score must beat to mean anything: the best a model that ignores its input gets.

    majority_class_accuracy([1, 0, 1, 1])        # 0.75: always predict the most common label
    best_constant_f1([1, 0, 0, 0])               # 0.4: F1 of class 1 when always predicting 1
    chance_baseline_choices([2, 4, 4])           # 1/n per example, averaged: multiple choice

Computed from the gold labels of the scored split (never from training data), so the
baseline is exactly what a constant predictor scores on the rows the model was scored
on. Metrics for which no constant predictor does better than 0 (MCC, Pearson, Spearman,
SQuAD v1.1 EM/F1) have baseline 0; `metric_baseline` says which is which.
"""

from __future__ import annotations

from collections import Counter
from typing import Sequence

import numpy as np

# Correlations are undefined (scored 0) for a constant prediction; MCC of a constant
# prediction is 0 by definition (sklearn): 0 is what ignoring the input gets.
ZERO_BASELINE = ("matthews_corrcoef", "pearson", "spearman")


def majority_class(labels: Sequence) -> int:
    """The most common label (the smallest on a tie, so the result does not depend on order)."""
    counts = Counter(np.asarray(labels).tolist())
    if not counts:
        raise ValueError("no labels: a baseline needs at least one scored example")
    top = max(counts.values())
    return min(label for label, count in counts.items() if count == top)


def majority_class_accuracy(labels: Sequence) -> float:
    labels = np.asarray(labels)
    return float((labels == majority_class(labels)).mean())


def best_constant_f1(labels: Sequence, positive: int = 1) -> float:
    """The best F1 of class `positive` (GLUE's MRPC/QQP F1) a constant prediction gets:
    always predicting `positive` (precision p, recall 1: 2p / (1 + p) for a positive rate
    p); always predicting anything else scores 0. Where the positive class is the
    majority (MRPC), this is the majority-class predictor's F1; where it is not (QQP),
    the majority class would score 0, but a model that always says "duplicate" scores
    2p / (1 + p), and that is the number it has to beat."""
    rate = float((np.asarray(labels) == positive).mean())
    return 2 * rate / (1 + rate)


def chance_baseline_choices(num_choices: Sequence[int]) -> float:
    """Expected accuracy of guessing uniformly among each example's choices: mean of 1/n
    (multiple choice with n_i choices for example i)."""
    counts = np.asarray(num_choices, dtype=np.float64)
    if counts.size == 0 or (counts < 1).any():
        raise ValueError(f"every example needs at least one choice, got {list(num_choices)[:10]}")
    return float((1.0 / counts).mean())


def metric_baseline(metric: str, labels: Sequence) -> tuple[float, str]:
    """(baseline, how it was found) for a GLUE metric given the scored split's gold labels."""
    if metric == "accuracy":
        label = majority_class(labels)
        return majority_class_accuracy(labels), f"majority class (always {label})"
    if metric == "f1":
        return best_constant_f1(labels), "F1 of always predicting class 1 (the best constant prediction)"
    if metric in ZERO_BASELINE:
        return 0.0, "0: what a constant prediction scores"
    raise ValueError(f"no baseline rule for metric {metric!r}; known: accuracy, f1, {', '.join(ZERO_BASELINE)}")
