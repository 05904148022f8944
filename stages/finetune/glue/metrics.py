"""GLUE metrics by name, computed by scikit-learn and SciPy (never by hand).

Scores are plain floats in [0, 1] (correlations in [-1, 1]) so they serialise to JSON
and compare across runs; the GLUE leaderboard's x100 is a presentation detail.
"""

from __future__ import annotations

from typing import Callable

import numpy as np


def _accuracy(predictions: np.ndarray, labels: np.ndarray) -> float:
    from sklearn.metrics import accuracy_score

    return float(accuracy_score(labels, predictions))


def _f1(predictions: np.ndarray, labels: np.ndarray) -> float:
    from sklearn.metrics import f1_score

    # GLUE's F1 (MRPC, QQP) is that of the positive class "1" (id 1). Asked per class, not
    # as "binary": a T5's unreadable generations (class -1) make a third class, which
    # average="binary" refuses; they count as not-1 predictions here.
    return float(f1_score(labels, predictions, labels=[1], average=None, zero_division=0.0)[0])


def _matthews(predictions: np.ndarray, labels: np.ndarray) -> float:
    from sklearn.metrics import matthews_corrcoef

    return float(matthews_corrcoef(labels, predictions))


def _pearson(predictions: np.ndarray, labels: np.ndarray) -> float:
    from scipy.stats import pearsonr

    return _correlation(pearsonr, predictions, labels)


def _spearman(predictions: np.ndarray, labels: np.ndarray) -> float:
    from scipy.stats import spearmanr

    return _correlation(spearmanr, predictions, labels)


def _correlation(fn, predictions: np.ndarray, labels: np.ndarray) -> float:
    # A constant prediction (an untrained head) has no defined correlation; SciPy warns
    # and returns nan, which we report as 0 so that a metrics file always holds numbers.
    if np.ptp(predictions) == 0 or np.ptp(labels) == 0:
        return 0.0
    return float(fn(predictions, labels)[0])


METRICS: dict[str, Callable[[np.ndarray, np.ndarray], float]] = {
    "accuracy": _accuracy,
    "f1": _f1,
    "matthews_corrcoef": _matthews,
    "pearson": _pearson,
    "spearman": _spearman,
}


def compute_metrics(names: tuple[str, ...] | list[str], predictions, labels) -> dict[str, float]:
    """{metric name: score} for predicted class ids (or regression scores) against gold."""
    predictions, labels = np.asarray(predictions), np.asarray(labels)
    if predictions.shape != labels.shape:
        raise ValueError(f"{len(predictions)} predictions for {len(labels)} labels")
    unknown = [n for n in names if n not in METRICS]
    if unknown:
        raise ValueError(f"unknown metrics {unknown}; known: {sorted(METRICS)}")
    return {name: METRICS[name](predictions, labels) for name in names}
