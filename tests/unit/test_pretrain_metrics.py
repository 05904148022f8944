"""Pretraining metrics: part statistics -> losses and accuracies, throughput and MFU, and
the interval meter's all-reduce on a real (one-process, gloo) process group."""

from __future__ import annotations

import math

import pytest
import torch
import torch.distributed as dist

from stages.pretrain.metrics import IntervalMeter, Throughput, part_metrics, perplexity
from stages.pretrain.objectives import ObjectiveOutput


def stats(loss_sum: float, correct: float, count: float) -> torch.Tensor:
    return torch.tensor([loss_sum, correct, count], dtype=torch.float64)


def test_part_metrics_are_token_weighted_and_the_loss_is_their_sum():
    record = part_metrics({"mlm": stats(30.0, 4, 10), "nsp": stats(1.4, 1, 2)}, prefix="val_")
    assert record == pytest.approx({"val_loss": 3.0 + 0.7, "val_mlm_loss": 3.0, "val_mlm_accuracy": 0.4,
                                    "val_nsp_loss": 0.7, "val_nsp_accuracy": 0.5})


def test_a_part_without_predictions_is_nan_not_zero():
    record = part_metrics({"span": stats(0, 0, 0)})
    assert math.isnan(record["span_loss"]) and math.isnan(record["span_accuracy"])


def test_throughput_and_mfu_by_hand():
    # 2 workers x 4 rows of 32 tokens per step; 3 steps in 1.5 s; 1e9 FLOPs per row; 2 x 1 TFLOP/s.
    rates = Throughput(samples_per_step=8, tokens_per_sample=32, flops_per_sample=10**9,
                       peak_flops=2e12).rates(steps=3, seconds=1.5)
    assert rates == pytest.approx({"samples_per_s": 16.0, "tokens_per_s": 512.0, "mfu": 16e9 / 2e12})


def test_perplexity_is_exp_and_does_not_overflow():
    assert perplexity(math.log(7.0)) == pytest.approx(7.0)
    assert math.isfinite(perplexity(1e4))


@pytest.fixture
def process_group(tmp_path):
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_interval_meter_sums_micro_batches_and_steps_then_starts_over(process_group):
    meter = IntervalMeter(("mlm", "sop"), torch.device("cpu"))
    throughput = Throughput(samples_per_step=4, tokens_per_sample=16, flops_per_sample=1000, peak_flops=1e6)
    for mlm, sop in ((stats(10.0, 2, 5), stats(0.6, 1, 2)), (stats(20.0, 3, 5), stats(0.8, 2, 2))):
        meter.add(ObjectiveOutput(loss=torch.tensor(0.0), parts={"mlm": mlm, "sop": sop}))
        meter.add_step(step_seconds=0.5, data_seconds=0.1)
    record = meter.summarize(throughput)
    assert record == pytest.approx({
        "loss": 3.0 + 0.35, "mlm_loss": 3.0, "mlm_accuracy": 0.5, "sop_loss": 0.35, "sop_accuracy": 0.75,
        "samples_per_s": 8.0, "tokens_per_s": 128.0, "mfu": 8000 / 1e6,
        "data_wait_s": 0.1, "data_wait_share": 0.2,
    })
    meter.add(ObjectiveOutput(loss=torch.tensor(0.0), parts={"mlm": stats(1.0, 1, 1), "sop": stats(2.0, 0, 1)}))
    meter.add_step(step_seconds=1.0, data_seconds=0.0)
    again = meter.summarize(throughput)
    assert again["mlm_loss"] == 1.0 and again["sop_accuracy"] == 0.0 and again["samples_per_s"] == 4.0
