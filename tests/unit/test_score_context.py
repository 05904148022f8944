"""Baselines and 95% intervals (stages.finetune.baselines, intervals, score_context): the
numbers a constant predictor scores on the real dev sets, intervals that agree with the
library metrics and with known values, and the verdict that marks a score at chance."""

from __future__ import annotations

import numpy as np
import pytest

from stages.finetune import intervals
from stages.finetune.baselines import (
    best_constant_f1, chance_baseline_choices, majority_class, majority_class_accuracy, metric_baseline,
)
from stages.finetune.glue.metrics import compute_metrics
from stages.finetune.glue.reader import read_split
from stages.finetune.score_context import as_metrics, describe, glue_contexts, read_contexts, verdict
from stages.finetune.tasks import get_task


def dev_labels(data_dir, task: str) -> np.ndarray:
    return read_split(get_task(task), data_dir, "dev").labels


def test_baselines_of_the_real_dev_sets_are_the_constant_predictors_scores(data_dir):
    # bert-tiny's SST-2 accuracy of 0.5092 is exactly this: always "1".
    sst2 = dev_labels(data_dir, "sst2")
    assert majority_class(sst2) == 1 and round(majority_class_accuracy(sst2), 4) == 0.5092
    # The demo's MRPC F1 of 0.8122 is always predicting "1" (68% of the dev pairs).
    mrpc = dev_labels(data_dir, "mrpc")
    assert round(best_constant_f1(mrpc), 4) == 0.8122
    assert best_constant_f1(mrpc) == compute_metrics(("f1",), np.ones_like(mrpc), mrpc)["f1"]
    assert metric_baseline("matthews_corrcoef", dev_labels(data_dir, "cola"))[0] == 0.0
    # Where class 1 is the minority, always predicting 1 still scores 2p / (1 + p): that is the baseline.
    minority = np.array([1, 0, 0, 0])
    assert best_constant_f1(minority) == pytest.approx(0.4) and majority_class(minority) == 0


def test_chance_for_multiple_choice_is_the_mean_of_one_over_n():
    assert chance_baseline_choices([2, 4, 4]) == pytest.approx((1 / 2 + 1 / 4 + 1 / 4) / 3)
    assert chance_baseline_choices([4] * 10) == 0.25
    with pytest.raises(ValueError, match="at least one choice"):
        chance_baseline_choices([2, 0])


def test_wilson_interval_matches_known_values():
    # Wilson (1927) for 50/100 and 0/20: textbook values.
    low, high = intervals.proportion_ci95(50, 100)
    assert (round(low, 4), round(high, 4)) == (0.4038, 0.5962)
    low, high = intervals.proportion_ci95(0, 20)
    assert low == pytest.approx(0.0, abs=1e-12) and round(high, 4) == 0.1611


@pytest.mark.parametrize("metric", ["f1", "matthews_corrcoef", "accuracy"])
def test_resample_statistics_equal_the_library_metrics(metric):
    rng = np.random.default_rng(0)
    for trial in range(30):
        n = int(rng.integers(3, 200))
        labels = rng.integers(0, 2 if trial % 2 else 3, n)
        predictions = rng.integers(-1, 3, n) if trial % 3 else np.full(n, 1)  # -1: a T5's unreadable generation
        if metric == "f1":
            labels, predictions = np.minimum(labels, 1), np.minimum(predictions, 1)
        expected = compute_metrics((metric,), predictions, labels)[metric]
        assert intervals.STATISTICS[metric](predictions, labels) == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize("metric", ["pearson", "spearman"])
def test_correlation_statistics_equal_scipy_and_are_zero_when_constant(metric):
    rng = np.random.default_rng(1)
    gold = rng.uniform(0, 5, 300)
    predicted = np.round(gold + rng.normal(0, 1, 300), 1).astype(np.float32)  # ties, float32 like a head
    expected = compute_metrics((metric,), predicted, gold)[metric]
    assert intervals.STATISTICS[metric](predicted, gold) == pytest.approx(expected, abs=1e-6)
    assert intervals.STATISTICS[metric](np.full(300, 2.5, dtype=np.float32), gold) == 0.0


def test_bootstrap_is_seeded_and_covers_the_score():
    rng = np.random.default_rng(2)
    labels = rng.integers(0, 2, 400)
    predictions = np.where(rng.random(400) < 0.8, labels, 1 - labels)
    first = intervals.bootstrap_ci95(intervals.binary_f1, predictions, labels, seed=0)
    assert first == intervals.bootstrap_ci95(intervals.binary_f1, predictions, labels, seed=0)
    assert first != intervals.bootstrap_ci95(intervals.binary_f1, predictions, labels, seed=1)
    score = compute_metrics(("f1",), predictions, labels)["f1"]
    assert first[0] < score < first[1] and first[1] - first[0] < 0.15
    with pytest.raises(ValueError, match="different lengths"):
        intervals.bootstrap_ci95(intervals.binary_f1, predictions, labels[:10], seed=0)


def test_a_constant_prediction_is_marked_at_chance_and_a_good_one_above(data_dir):
    mrpc = dev_labels(data_dir, "mrpc")
    contexts = glue_contexts(("f1", "accuracy"), np.ones_like(mrpc), mrpc, seed=0)
    assert contexts["f1"].baseline == pytest.approx(0.8122, abs=1e-4)
    assert contexts["f1"].ci95[0] <= 0.8122 <= contexts["f1"].ci95[1]
    assert {m: verdict(c.baseline, c.ci95) for m, c in contexts.items()} == {"f1": "chance", "accuracy": "chance"}
    cola = dev_labels(data_dir, "cola")
    constant = glue_contexts(("matthews_corrcoef",), np.ones_like(cola), cola, seed=0)["matthews_corrcoef"]
    assert constant.ci95 == (0.0, 0.0) and verdict(constant.baseline, constant.ci95) == "chance"

    good = np.where(np.random.default_rng(3).random(len(cola)) < 0.9, cola, 1 - cola)
    context = glue_contexts(("matthews_corrcoef",), good, cola, seed=0)["matthews_corrcoef"]
    assert verdict(context.baseline, context.ci95) == "above"
    worse = glue_contexts(("accuracy",), 1 - cola, cola, seed=0)["accuracy"]
    assert verdict(worse.baseline, worse.ci95) == "below"


def test_flat_keys_round_trip_and_describe(data_dir):
    sst2 = dev_labels(data_dir, "sst2")
    metrics = {"accuracy": 0.5092, **as_metrics(glue_contexts(("accuracy",), np.ones_like(sst2), sst2, seed=0))}
    assert set(metrics) == {"accuracy", "accuracy_baseline", "accuracy_ci95_low", "accuracy_ci95_high", "score_notes"}
    assert "majority class (always 1)" in metrics["score_notes"]["accuracy"]
    assert "Wilson" in metrics["score_notes"]["accuracy"]
    prefixed = {f"sst2/{k}": v for k, v in metrics.items() if k != "score_notes"}
    context = read_contexts(prefixed)["sst2/accuracy"]
    assert context["baseline"] == pytest.approx(0.50917, abs=1e-5)
    assert describe(0.5092, context).endswith("baseline 0.5092 ≈ chance")
    assert describe(0.5092, None) == "0.5092"


def test_f1_with_unreadable_t5_generations_counts_them_as_not_positive():
    # average="binary" refused the third class (-1) and a T5 on MRPC/QQP crashed at scoring.
    assert compute_metrics(("f1",), np.array([1, -1, 0, 1]), np.array([1, 1, 0, 0]))["f1"] == pytest.approx(0.5)
