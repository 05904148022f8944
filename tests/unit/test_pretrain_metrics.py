"""Pretraining metrics: part statistics -> losses and accuracies, throughput and MFU, and
the interval meter's all-reduce on a real (one-process, gloo) process group."""

from __future__ import annotations

import math

import pytest
import torch
import torch.distributed as dist

from stages.objectives.output import ObjectiveOutput
from stages.pretrain.metrics import IntervalMeter, Throughput, part_metrics, perplexity


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


def test_the_logged_loss_weights_the_parts_as_the_trained_loss_and_the_parts_stay_unweighted():
    parts = {"mlm": stats(30.0, 4, 10), "rtd": stats(1.4, 1, 2)}
    record = part_metrics(parts, prefix="val_", weights={"rtd": 50.0})
    assert record == pytest.approx({"val_loss": 3.0 + 50 * 0.7, "val_mlm_loss": 3.0, "val_mlm_accuracy": 0.4,
                                    "val_rtd_loss": 0.7, "val_rtd_accuracy": 0.5})
    # Weights of 1: the same bits as the plain sum, in the same order, whatever the values.
    values = torch.randn(1000, dtype=torch.float64) * torch.logspace(-300, 300, 1000, dtype=torch.float64)
    assert all(1.0 * v == v for v in values.tolist())
    for first, second in values.view(-1, 2).tolist():
        many = {"a": stats(first, 0, 1), "b": stats(second, 0, 1)}
        assert part_metrics(many, weights={"a": 1.0, "b": 1.0})["loss"] == 0.0 + first + second
        assert part_metrics(many)["loss"] == 0.0 + first + second


def test_electra_logs_the_loss_it_trains_in_training_and_validation(process_group):
    from stages.models.build import build_preset
    from stages.objectives.mlm.loss import MaskedLM
    from stages.objectives.mlm.rtd import ReplacedTokenDetection
    from stages.pretrain.metrics import PartTotals

    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(5, 512, (2, 12), generator=generator)
    masked = torch.rand(2, 12, generator=generator) < 0.3
    batch = {"input_ids": ids.masked_fill(masked, 3), "attention_mask": torch.ones_like(ids),
             "token_type_ids": torch.zeros_like(ids), "labels": ids.masked_fill(~masked, -100)}
    torch.manual_seed(0)
    electra = build_preset("electra-debug", dropout=0.0, rtd_weight=20.0)
    output = ReplacedTokenDetection(12)(electra.eval(), batch)
    assert output.weights == {"rtd": 20.0} and output.weight("mlm") == 1.0
    validation = PartTotals(("mlm", "rtd"), torch.device("cpu"))  # as train_loop's validation
    validation.add(output)
    record = part_metrics(validation.as_dict(), prefix="val_")
    mean = {part: float(output.parts[part][0] / output.parts[part][2]) for part in ("mlm", "rtd")}
    assert record["val_loss"] == pytest.approx(output.loss.item(), rel=1e-6)
    assert record["val_loss"] == pytest.approx(mean["mlm"] + 20.0 * mean["rtd"], rel=1e-12)
    assert (record["val_mlm_loss"], record["val_rtd_loss"]) == pytest.approx((mean["mlm"], mean["rtd"]), rel=1e-12)
    meter = IntervalMeter(("mlm", "rtd"), torch.device("cpu"), sources=("web",))  # training, with a mixture
    meter.add(output, source=0)
    meter.add_step(step_seconds=1.0, data_seconds=0.0)
    trained = meter.summarize(Throughput(samples_per_step=2, tokens_per_sample=12, flops_per_sample=1,
                                         peak_flops=1.0))
    assert trained["loss"] == trained["loss/web"] == record["val_loss"]
    # MaskedLM's parts weigh 1: its logged loss is the plain sum, bit for bit.
    torch.manual_seed(0)
    bert = build_preset("bert-debug", dropout=0.0)
    pair = dict(batch, next_sentence_label=torch.tensor([0, 1]))
    mlm_output = MaskedLM(12, "nsp")(bert, pair)
    assert mlm_output.weights == {}
    meter = IntervalMeter(("mlm", "nsp"), torch.device("cpu"))
    meter.add(mlm_output)
    meter.add_step(step_seconds=1.0, data_seconds=0.0)
    logged = meter.summarize(Throughput(samples_per_step=2, tokens_per_sample=12, flops_per_sample=1, peak_flops=1.0))
    assert logged["loss"] == 0.0 + logged["mlm_loss"] + logged["nsp_loss"]
