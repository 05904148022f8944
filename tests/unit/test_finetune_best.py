"""finetune.keep_best: which epoch wins, and its weights surviving on disk for a resumed run."""

from __future__ import annotations

import math

import pytest
import torch
from pydantic import ValidationError

from stages.finetune.best_checkpoint import BEST_DIR, BestDevCheckpoint, best_epoch_facts
from stages.finetune.config import FinetuneConfig


def test_the_highest_dev_score_wins_and_ties_keep_the_earlier_epoch(tmp_path):
    best = BestDevCheckpoint(tmp_path / BEST_DIR, metric="f1")
    decisions = [best.consider(epoch, {"dev_f1": score, "dev_precision": 1.0})
                 for epoch, score in enumerate([0.5, 0.7, 0.6, 0.7, math.nan])]
    assert decisions == [True, True, False, False, False]
    assert best.best_epoch == 1 and best.record == {"epoch": 1, "metric": "f1", "score": 0.7}


def test_a_diverged_epoch_never_stays_the_best(tmp_path):
    best = BestDevCheckpoint(tmp_path / BEST_DIR, metric="pearson")
    assert [best.consider(epoch, {"dev_pearson": score}) for epoch, score in enumerate([math.nan, 0.1, 0.05])] \
        == [True, True, False]
    assert best.best_epoch == 1


def test_a_missing_main_metric_names_what_the_scores_hold(tmp_path):
    best = BestDevCheckpoint(tmp_path / BEST_DIR, metric="matthews_corrcoef")
    with pytest.raises(KeyError, match=r"dev_matthews_corrcoef, but the dev scores hold only \['dev_accuracy'\]"):
        best.consider(0, {"dev_accuracy": 0.5})


def test_the_best_weights_and_record_survive_a_restart(tmp_path):
    weights = torch.nn.Linear(3, 2)
    state = {name: tensor.detach().clone() for name, tensor in weights.state_dict().items()}
    best = BestDevCheckpoint(tmp_path / BEST_DIR, metric="accuracy")
    assert best.consider(0, {"dev_accuracy": 0.6})
    best.save(state, epoch=0)

    resumed = BestDevCheckpoint(tmp_path / BEST_DIR, metric="accuracy")  # a new worker after a crash
    assert resumed.best_epoch == 0
    assert not resumed.consider(1, {"dev_accuracy": 0.55})  # still measured against epoch 0
    loaded = resumed.load_state_dict()
    assert loaded.keys() == state.keys() and all(torch.equal(loaded[k], state[k]) for k in state)
    assert not (tmp_path / f"{BEST_DIR}.partial").exists()

    assert best_epoch_facts(tmp_path, keep_best=True) == {"best_epoch": 0}  # for metrics.json
    assert best_epoch_facts(tmp_path, keep_best=False) == {}

    # Another metric's record, or a run starting from scratch, does not inherit it.
    assert BestDevCheckpoint(tmp_path / BEST_DIR, metric="f1").best_epoch is None
    resumed.forget(remove=True)
    assert resumed.best_epoch is None and not (tmp_path / BEST_DIR).exists()


@pytest.mark.parametrize("values, message", [
    ({"keep_best": True, "eval_every_epoch": False}, "set eval_every_epoch: true"),
    ({"keep_best": True, "zero_stage": 3}, "use zero_stage 0, 1 or 2 with keep_best"),
])
def test_impossible_keep_best_settings_are_rejected_with_the_fix(values, message):
    with pytest.raises(ValidationError, match=message):
        FinetuneConfig(**values)
    assert FinetuneConfig().keep_best is False
