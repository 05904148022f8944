"""GLUE metrics agree with scikit-learn and SciPy, and handle the degenerate cases."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import pearsonr, spearmanr
from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef

from stages.finetune.glue.metrics import compute_metrics
from stages.finetune.tasks import get_task


def test_classification_metrics_agree_with_sklearn():
    rng = np.random.default_rng(0)
    labels, predictions = rng.integers(0, 2, 500), rng.integers(0, 2, 500)
    scores = compute_metrics(("accuracy", "f1", "matthews_corrcoef"), predictions, labels)
    assert scores["accuracy"] == pytest.approx(accuracy_score(labels, predictions))
    assert scores["f1"] == pytest.approx(f1_score(labels, predictions))
    assert scores["matthews_corrcoef"] == pytest.approx(matthews_corrcoef(labels, predictions))


def test_accuracy_by_hand_on_sst2_sized_input():
    labels = np.array([1] * 444 + [0] * 428)
    predictions = np.ones(872, dtype=int)  # "always positive"
    assert compute_metrics(get_task("sst2").metrics, predictions, labels) == {"accuracy": 444 / 872}


def test_regression_metrics_agree_with_scipy():
    rng = np.random.default_rng(1)
    labels = rng.uniform(0, 5, 300)
    predictions = labels + rng.normal(0, 1, 300)
    scores = compute_metrics(get_task("stsb").metrics, predictions, labels)
    assert scores["pearson"] == pytest.approx(pearsonr(predictions, labels)[0])
    assert scores["spearman"] == pytest.approx(spearmanr(predictions, labels)[0])


def test_constant_regression_prediction_scores_zero_not_nan():
    scores = compute_metrics(("pearson", "spearman"), np.full(10, 2.5), np.arange(10.0))
    assert scores == {"pearson": 0.0, "spearman": 0.0}


def test_mismatched_lengths_and_unknown_metric_are_errors():
    with pytest.raises(ValueError, match="3 predictions for 2 labels"):
        compute_metrics(("accuracy",), [0, 1, 1], [0, 1])
    with pytest.raises(ValueError, match=r"unknown metrics \['bleu'\]; known: .*accuracy"):
        compute_metrics(("bleu",), [0], [0])
