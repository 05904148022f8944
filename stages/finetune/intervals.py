"""95% intervals for scores, from the per-example results they were computed from.

    proportion_ci95(successes=444, n=872)                          # accuracy, EM: Wilson score interval
    bootstrap_ci95(binary_f1, predictions, labels, seed=0)         # F1, MCC, correlations, mean F1

Proportions (accuracy, exact match: a mean of 0/1 outcomes) get the Wilson interval
(SciPy's `binomtest(...).proportion_ci(method="wilson")`): it stays inside [0, 1] and is
right at small n and at rates near 0 or 1, where the normal approximation is not.

Everything else is resampled: examples are drawn with replacement (all arrays together,
row by row), the metric is computed on each resample, and the 2.5th and 97.5th
percentiles of those values are the interval (SciPy's `bootstrap`, percentile method,
seeded, so a re-run gives the same interval). The percentile method rather than SciPy's
default BCa: BCa's jackknife costs one metric evaluation per example (minutes on QQP's
40k rows) and gives NaN when every resample scores the same (a constant prediction has
MCC 0 on every resample); the two agree to the third decimal at GLUE sizes.

The statistics below take `axis`, so SciPy evaluates a batch of resamples at once; each
equals the library metric on the full data (scikit-learn / SciPy; tests check it).
"""

from __future__ import annotations

from typing import Callable

import numpy as np

NUM_RESAMPLES = 2000
CONFIDENCE = 0.95
_MAX_ELEMENTS_PER_BATCH = 4_000_000  # resamples x examples held in memory at once (~32 MB of float64)


def proportion_ci95(successes: int, n: int) -> tuple[float, float]:
    """Wilson score interval of successes / n."""
    from scipy.stats import binomtest

    if n < 1:
        raise ValueError("a proportion needs at least one trial")
    ci = binomtest(int(successes), int(n)).proportion_ci(confidence_level=CONFIDENCE, method="wilson")
    return float(ci.low), float(ci.high)


def bootstrap_ci95(metric_fn: Callable[..., float], *arrays, seed: int,
                   n_resamples: int = NUM_RESAMPLES) -> tuple[float, float]:
    """Percentile bootstrap interval of metric_fn(*arrays), resampling rows of all arrays
    together. metric_fn may take `axis` (then batches of resamples are computed at once)."""
    from scipy.stats import bootstrap

    arrays = tuple(np.asarray(a) for a in arrays)
    n = len(arrays[0])
    if any(len(a) != n for a in arrays):
        raise ValueError(f"arrays of different lengths {[len(a) for a in arrays]}: rows are resampled together")
    if n < 2:
        raise ValueError("a bootstrap interval needs at least two examples")
    result = bootstrap(arrays, metric_fn, paired=True, n_resamples=n_resamples, method="percentile",
                       confidence_level=CONFIDENCE, batch=max(1, _MAX_ELEMENTS_PER_BATCH // n),
                       rng=np.random.default_rng(seed))
    return float(result.confidence_interval.low), float(result.confidence_interval.high)


# Statistics over the last axis (one resample per row), equal to the library metrics.

def mean(values: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.mean(values, axis=axis)


def accuracy(predictions: np.ndarray, labels: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.mean(predictions == labels, axis=axis)


def binary_f1(predictions: np.ndarray, labels: np.ndarray, axis: int = -1) -> np.ndarray:
    """F1 of class 1 (scikit-learn's f1_score(pos_label=1), 0 when undefined); any other
    prediction (0, or -1 for an unreadable generation) counts as not 1."""
    predicted, gold = predictions == 1, labels == 1
    true_pos = np.sum(predicted & gold, axis=axis)
    denominator = np.sum(predicted, axis=axis) + np.sum(gold, axis=axis)
    return np.where(denominator > 0, 2 * true_pos / np.maximum(denominator, 1), 0.0)


def matthews(predictions: np.ndarray, labels: np.ndarray, axis: int = -1) -> np.ndarray:
    """Multiclass Matthews correlation from the confusion counts (scikit-learn's formula;
    0 when a side is constant)."""
    predictions, labels = np.moveaxis(predictions, axis, -1), np.moveaxis(labels, axis, -1)
    total = labels.shape[-1]
    correct = np.sum(predictions == labels, axis=-1).astype(np.float64)
    predicted_sq = gold_sq = cross = 0.0
    for k in np.union1d(np.unique(predictions), np.unique(labels)):
        p_k = np.sum(predictions == k, axis=-1).astype(np.float64)
        t_k = np.sum(labels == k, axis=-1).astype(np.float64)
        predicted_sq, gold_sq, cross = predicted_sq + p_k**2, gold_sq + t_k**2, cross + p_k * t_k
    numerator = correct * total - cross
    denominator = np.sqrt((total**2 - predicted_sq) * (total**2 - gold_sq))
    return np.where(denominator > 0, numerator / np.where(denominator > 0, denominator, 1.0), 0.0)


def pearson(predictions: np.ndarray, labels: np.ndarray, axis: int = -1) -> np.ndarray:
    """Pearson's r, 0 where either side is constant (`stages.finetune.glue.metrics`'s rule)."""
    predictions, labels = np.asarray(predictions, dtype=np.float64), np.asarray(labels, dtype=np.float64)
    x = predictions - np.mean(predictions, axis=axis, keepdims=True)
    y = labels - np.mean(labels, axis=axis, keepdims=True)
    defined = (np.ptp(predictions, axis=axis) > 0) & (np.ptp(labels, axis=axis) > 0)
    denominator = np.sqrt(np.sum(x * x, axis=axis) * np.sum(y * y, axis=axis))
    return np.where(defined, np.sum(x * y, axis=axis) / np.where(defined, denominator, 1.0), 0.0)


def spearman(predictions: np.ndarray, labels: np.ndarray, axis: int = -1) -> np.ndarray:
    """Spearman's rho: Pearson's r of the ranks (ties get their average rank)."""
    from scipy.stats import rankdata

    return pearson(rankdata(predictions, axis=axis), rankdata(labels, axis=axis), axis=axis)


def micro_f1(true_positives: np.ndarray, num_predicted: np.ndarray, num_gold: np.ndarray,
             axis: int = -1) -> np.ndarray:
    """Micro F1 from per-example counts (entities of a CoNLL sentence): 2 TP / (P + G)."""
    denominator = np.sum(num_predicted, axis=axis) + np.sum(num_gold, axis=axis)
    return np.where(denominator > 0, 2 * np.sum(true_positives, axis=axis) / np.maximum(denominator, 1), 0.0)


STATISTICS: dict[str, Callable[..., np.ndarray]] = {
    "accuracy": accuracy, "f1": binary_f1, "matthews_corrcoef": matthews,
    "pearson": pearson, "spearman": spearman,
}
