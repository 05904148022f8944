"""Seeded 95% intervals for text scores: a percentile bootstrap over sentences.

A corpus score (BLEU, chrF) is not a mean of sentence scores, so each resample is
scored as a corpus: every sentence's sufficient statistics (n-gram matches and totals,
lengths) are summed over the resampled sentences and the library turns the sums into
the score, which is how sacreBLEU's own `--confidence` and paired bootstrap resample
(sacrebleu/significance.py). ROUGE is a mean of per-example scores, resampled as a mean.

The bootstrap is the one every other interval in the reports uses
(stages.finetune.intervals.bootstrap_ci95: SciPy's `bootstrap`, percentile method, 2,000
resamples, `np.random.default_rng(seed)`), applied to the example indices; it is
restated here rather than imported because the fine-tuning stage imports this package
(the import contracts forbid the cycle). A unit test checks that both give the same
interval for the same data and seed.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

NUM_RESAMPLES = 2000
CONFIDENCE = 0.95
_MAX_ELEMENTS_PER_BATCH = 4_000_000  # resamples x examples held at once, as stages.finetune.intervals


def bootstrap_ci95(statistic: Callable[..., np.ndarray], num_examples: int, *, seed: int,
                   n_resamples: int = NUM_RESAMPLES) -> tuple[float, float] | None:
    """Interval of statistic(indices, axis=-1) over resamples of range(num_examples);
    None for fewer than two examples (nothing to resample)."""
    from scipy.stats import bootstrap

    if num_examples < 2:
        return None
    result = bootstrap((np.arange(num_examples),), statistic, paired=True, n_resamples=n_resamples,
                       method="percentile", confidence_level=CONFIDENCE,
                       batch=max(1, _MAX_ELEMENTS_PER_BATCH // num_examples),
                       rng=np.random.default_rng(seed))
    return float(result.confidence_interval.low), float(result.confidence_interval.high)


def mean_of(values: Sequence[float]) -> Callable[..., np.ndarray]:
    """The statistic "mean of the resampled examples' values"."""
    values = np.asarray(values, dtype=np.float64)

    def statistic(indices: np.ndarray, axis: int = -1) -> np.ndarray:
        return np.mean(values[np.moveaxis(np.asarray(indices), axis, -1)], axis=-1)

    return statistic


def corpus_score_of(sentence_stats: np.ndarray, score_from_totals: Callable[[list[int]], float]
                    ) -> Callable[..., np.ndarray]:
    """The statistic "corpus score of the resampled sentences": per-sentence sufficient
    statistics (num_examples, k) summed over each resample, scored by the library."""
    stats = np.asarray(sentence_stats, dtype=np.int64)
    num_examples = stats.shape[0]

    def statistic(indices: np.ndarray, axis: int = -1) -> np.ndarray:
        indices = np.moveaxis(np.asarray(indices), axis, -1)
        rows = indices.reshape(-1, indices.shape[-1])
        # How often each sentence was drawn, per resample, in one bincount (row r's
        # indices shifted by r * num_examples so that rows do not mix).
        offsets = (np.arange(len(rows)) * num_examples)[:, None]
        counts = np.bincount((rows + offsets).ravel(), minlength=len(rows) * num_examples)
        totals = counts.reshape(len(rows), num_examples) @ stats          # (resamples, k)
        scores = [score_from_totals(total.tolist()) for total in totals]
        return np.asarray(scores, dtype=np.float64).reshape(indices.shape[:-1])

    return statistic
