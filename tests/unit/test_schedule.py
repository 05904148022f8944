"""Learning-rate schedule: warmup, decay shapes, floor, LambdaLR use, validation."""

from __future__ import annotations

import math
import pickle

import pytest
import torch

from stages.training.schedule import WarmupDecaySchedule


def test_linear_warmup_reaches_the_peak_at_the_last_warmup_step():
    schedule = WarmupDecaySchedule(warmup_steps=10, max_steps=100)
    assert schedule(0) == pytest.approx(0.1)
    assert schedule(4) == pytest.approx(0.5)
    assert schedule(9) == pytest.approx(1.0)
    assert schedule(10) == pytest.approx(1.0)  # decay starts from the peak


def test_cosine_decay_passes_the_midpoint_and_ends_at_the_floor():
    schedule = WarmupDecaySchedule(warmup_steps=10, max_steps=110, min_lr_ratio=0.1)
    assert schedule(60) == pytest.approx(0.1 + 0.9 * 0.5)  # halfway through the decay
    assert schedule(110) == pytest.approx(0.1)
    assert schedule(500) == pytest.approx(0.1)  # holds the floor past max_steps
    values = [schedule(s) for s in range(10, 111)]
    assert all(a >= b for a, b in zip(values, values[1:]))  # never increases


def test_linear_and_constant_decay():
    linear = WarmupDecaySchedule(warmup_steps=0, max_steps=100, decay="linear", min_lr_ratio=0.0)
    assert [linear(s) for s in (0, 25, 50, 100)] == pytest.approx([1.0, 0.75, 0.5, 0.0])
    constant = WarmupDecaySchedule(warmup_steps=5, max_steps=100, decay="constant")
    assert constant(2) == pytest.approx(0.6) and constant(50) == 1.0 and constant(1000) == 1.0


def test_works_as_a_lambda_lr_and_survives_state_dict_and_pickle():
    parameter = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.AdamW([parameter], lr=1e-3)
    schedule = WarmupDecaySchedule(warmup_steps=4, max_steps=20)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)
    lrs = []
    for _ in range(20):
        lrs.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    assert lrs[0] == pytest.approx(2.5e-4) and max(lrs) == pytest.approx(1e-3)
    assert lrs[-1] == pytest.approx(1e-3 * schedule(19))
    assert pickle.loads(pickle.dumps(schedule)) == schedule  # Ray ships it to workers
    assert scheduler.state_dict()["last_epoch"] == 20
    assert not math.isnan(lrs[-1])


def test_inverse_sqrt_matches_hand_computed_values():
    schedule = WarmupDecaySchedule(warmup_steps=4, max_steps=10, decay="inverse_sqrt")
    # n = step + 1: n / 4 while warming up, then sqrt(4 / n); max_steps does not end it.
    assert [schedule(s) for s in (0, 1, 3, 4, 15, 99, 399)] == pytest.approx(
        [0.25, 0.5, 1.0, math.sqrt(0.8), 0.5, 0.2, 0.1])


def test_inverse_sqrt_is_the_transformer_paper_formula_scaled_to_its_peak():
    # lrate = d_model^-0.5 * min(n^-0.5, n * warmup^-1.5) (Vaswani et al. 2017, eq. 3),
    # whose peak at n = warmup is (d_model * warmup)^-0.5.
    d_model, warmup = 512, 4000
    peak = (d_model * warmup) ** -0.5
    schedule = WarmupDecaySchedule(warmup_steps=warmup, max_steps=1, decay="inverse_sqrt")
    for n in (1, 100, 3999, 4000, 4001, 10_000, 100_000):
        paper = d_model ** -0.5 * min(n ** -0.5, n * warmup ** -1.5)
        assert peak * schedule(n - 1) == pytest.approx(paper, rel=1e-12)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(warmup_steps=0, max_steps=10, decay="exp"), "decay must be one of"),
        (dict(warmup_steps=0, max_steps=10, decay="inverse_sqrt"), "inverse_sqrt schedule needs warmup_steps >= 1"),
        (dict(warmup_steps=0, max_steps=10, min_lr_ratio=2.0), "min_lr_ratio"),
    ],
)
def test_bad_settings_are_rejected(kwargs, message):
    with pytest.raises(ValueError, match=message):
        WarmupDecaySchedule(**kwargs)


def test_warmup_longer_than_training_never_reaches_the_peak():
    schedule = WarmupDecaySchedule(warmup_steps=20, max_steps=7)
    assert [schedule(s) for s in range(7)] == pytest.approx([(s + 1) / 20 for s in range(7)])


def test_pretrain_config_documents_every_field():
    from stages.pretrain.config import PretrainConfig

    config = PretrainConfig(max_steps=7, model={"num_layers": 1})  # warmup 20 > 7 is fine
    assert config.model.num_layers == 1 and config.adam_betas == (0.9, 0.95)
    assert all(field.description for field in PretrainConfig.model_fields.values())
