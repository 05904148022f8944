"""Per-source metrics of a data mixture: loss/<source> over a log interval (on a real
one-process gloo group), and the validation record as the sources' weighted mean."""

from __future__ import annotations

import math

import pytest
import torch
import torch.distributed as dist

from stages.objectives.output import ObjectiveOutput
from stages.pretrain.metrics import IntervalMeter, Throughput, mixture_validation


def output(loss_sum: float, correct: float, count: float) -> ObjectiveOutput:
    return ObjectiveOutput(loss=torch.tensor(0.0),
                           parts={"clm": torch.tensor([loss_sum, correct, count], dtype=torch.float64)})


@pytest.fixture
def process_group(tmp_path):
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_interval_meter_logs_each_source_that_had_batches(process_group):
    meter = IntervalMeter(("clm",), torch.device("cpu"), sources=("web", "books", "code"))
    throughput = Throughput(samples_per_step=1, tokens_per_sample=1, flops_per_sample=1, peak_flops=1.0)
    for source, stats in ((0, (20.0, 1, 10)), (1, (30.0, 1, 10)), (0, (40.0, 1, 10))):
        meter.add(output(*stats), source=source)
    meter.add_step(step_seconds=1.0, data_seconds=0.0)
    record = meter.summarize(throughput)
    assert record["loss"] == pytest.approx(90 / 30)
    assert record["loss/web"] == pytest.approx(60 / 20) and record["loss/books"] == pytest.approx(3.0)
    assert "loss/code" not in record  # no batch this interval: no made-up number
    meter.add(output(10.0, 1, 10), source=2)
    meter.add_step(step_seconds=1.0, data_seconds=0.0)
    assert set(meter.summarize(throughput)) & {"loss/web", "loss/books", "loss/code"} == {"loss/code"}


def test_mixture_validation_is_the_weighted_mean_of_the_sources():
    records = {"web": {"val_loss": 2.0, "val_clm_loss": 2.0, "val_clm_accuracy": 0.5, "val_perplexity": 7.4},
               "books": {"val_loss": 4.0, "val_clm_loss": 4.0, "val_clm_accuracy": 0.1, "val_perplexity": 54.6}}
    record = mixture_validation(records, {"web": 3.0, "books": 1.0}, "clm")
    assert record == pytest.approx({"val_loss": 2.5, "val_clm_loss": 2.5, "val_clm_accuracy": 0.4,
                                    "val_perplexity": math.exp(2.5), "val_loss/web": 2.0, "val_loss/books": 4.0})
