"""The pretrain stage's metrics: per-objective losses and accuracies, throughput, MFU
and time spent waiting for data, summed over a log interval on every rank and reduced
across ranks in one all-reduce.

    meter = IntervalMeter(objective.parts, device)
    meter.add(output)                       # each micro batch's ObjectiveOutput
    meter.add_step(step_seconds, data_seconds)
    record = meter.summarize(throughput)    # collective; starts the next interval

Record keys: loss (sum of the parts' mean losses, each times the part's weight in the
trained loss: what backward uses, e.g. ELECTRA's mlm + rtd_weight * rtd), <part>_loss
(unweighted) and <part>_accuracy for each part (clm; mlm with nsp, sop, sbo; mlm and rtd;
span), tokens_per_s, samples_per_s, mfu (only where a peak is known,
`stages.pretrain.peak_flops`; a value above 1 warns, naming where the peak came from),
data_wait_s (seconds per step spent in next(loader)) and data_wait_share (of the step).
Validation uses the same part statistics under a "val_" prefix (`part_metrics`).
With dataset.mixture: loss/<source> per source that had batches in the interval (the
same sum of part losses as loss), and val_loss/<source> (`mixture_validation`).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping
from dataclasses import dataclass

import torch
import torch.distributed as dist

from stages.objectives.output import LOSS_SUM, NUM_CORRECT, NUM_PREDICTIONS, ObjectiveOutput


class PartStats(dict):
    """Part name -> summed statistics (3,), with `weights`: each part's weight in the
    trained loss, for the parts whose weight is not 1 (ObjectiveOutput.weights)."""

    def __init__(self, stats: Mapping[str, torch.Tensor], weights: Mapping[str, float] | None = None):
        super().__init__(stats)
        self.weights = dict(weights or {})


def part_metrics(parts: Mapping[str, torch.Tensor], prefix: str = "",
                 weights: Mapping[str, float] | None = None) -> dict[str, float]:
    """Summed statistics per part -> {prefix}loss, {prefix}<part>_loss, {prefix}<part>_accuracy.
    {prefix}loss weights each part's mean loss as the trained loss does: `weights`, else
    those `parts` carries (PartStats, from PartTotals.as_dict), else 1 for every part.
    A part without any prediction (count 0) gets NaN rather than a made-up number."""
    if weights is None:
        weights = getattr(parts, "weights", {})
    record: dict[str, float] = {}
    total = 0.0
    for name, stats in parts.items():
        count = float(stats[NUM_PREDICTIONS])
        loss = float(stats[LOSS_SUM]) / count if count else math.nan
        record[f"{prefix}{name}_loss"] = loss
        record[f"{prefix}{name}_accuracy"] = float(stats[NUM_CORRECT]) / count if count else math.nan
        # 1.0 * loss is loss exactly (IEEE 754): parts that all weigh 1 log exactly their sum
        total += float(weights.get(name, 1.0)) * loss
    return {f"{prefix}loss": total, **record}


def perplexity(loss: float) -> float:
    return math.exp(min(loss, 50.0))  # exp overflows past ~709; 50 is already meaningless


@dataclass(frozen=True)
class Throughput:
    """What turns an interval's steps and seconds into rates."""

    samples_per_step: int   # global: micro_batch_size x accumulation x world_size
    tokens_per_sample: int  # span: encoder + decoder tokens
    flops_per_sample: int   # training FLOPs of one sample (the model's estimate)
    peak_flops: float | None  # peak FLOP/s of all workers together; None: no MFU
    peak_source: str = "pretrain.peak_tflops"  # named by the warning when MFU passes 100%
    warn: bool = True       # rank 0 only: one warning, not one per worker

    def rates(self, steps: int, seconds: float) -> dict[str, float]:
        samples_per_s = self.samples_per_step * steps / max(seconds, 1e-9)
        rates = {"tokens_per_s": samples_per_s * self.tokens_per_sample, "samples_per_s": samples_per_s}
        if self.peak_flops:
            rates["mfu"] = samples_per_s * self.flops_per_sample / self.peak_flops
            if rates["mfu"] > 1 and self.warn:
                # The text holds no number, so Python shows it once per process, not every step.
                warnings.warn(mfu_above_peak_message(self.peak_source), RuntimeWarning, stacklevel=2)
        return rates


def mfu_above_peak_message(peak_source: str) -> str:
    return (f"MFU above 100%: the peak used ({peak_source}) is below what this device does; "
            "set pretrain.peak_tflops to the device's dense peak TFLOP/s for the training dtype")


class PartTotals:
    """Running sums of each part's (loss sum, correct, count) on one rank, and the parts'
    weights in the trained loss as the outputs give them (constants of the objective and
    the model, so not summed: the same on every rank)."""

    def __init__(self, parts: tuple[str, ...], device: torch.device):
        self.parts = tuple(parts)
        self.totals = torch.zeros(len(self.parts), 3, dtype=torch.float64, device=device)
        self.weights: dict[str, float] = {}

    def add(self, output: ObjectiveOutput) -> None:
        for i, name in enumerate(self.parts):
            self.totals[i] += output.parts[name].to(self.totals.device)
        self.weights.update(output.weights)

    def as_dict(self, totals: torch.Tensor | None = None) -> PartStats:
        """Part name -> statistics (these totals, or `totals` shaped like them), with the weights."""
        totals = self.totals if totals is None else totals
        return PartStats({name: totals[i] for i, name in enumerate(self.parts)}, self.weights)


class IntervalMeter:
    """One log interval (log_every optimizer steps) on one rank. `sources`: the names of
    a data mixture's sources, whose losses are also summed apart."""

    def __init__(self, parts: tuple[str, ...], device: torch.device, sources: tuple[str, ...] = ()):
        self.parts, self.device, self.sources = tuple(parts), device, tuple(sources)
        self._reset()

    def _reset(self) -> None:
        self.totals = PartTotals(self.parts, self.device)
        self.source_totals = [PartTotals(self.parts, self.device) for _ in self.sources]
        self.steps, self.step_seconds, self.data_seconds = 0, 0.0, 0.0

    def add(self, output: ObjectiveOutput, source: int | None = None) -> None:
        """`source`: which mixture source the micro batch came from (None: no mixture)."""
        self.totals.add(output)
        if source is not None:
            self.source_totals[source].add(output)

    def add_step(self, step_seconds: float, data_seconds: float) -> None:
        self.steps += 1
        self.step_seconds += step_seconds
        self.data_seconds += data_seconds

    def summarize(self, throughput: Throughput) -> dict[str, float]:
        """The interval's record, identical on every rank (collective: every rank must
        call it at the same step). Times are averaged over ranks."""
        timing = torch.tensor([self.step_seconds, self.data_seconds], dtype=torch.float64, device=self.device)
        reduced = torch.cat([self.totals.totals.flatten()] + [t.totals.flatten() for t in self.source_totals]
                            + [timing])
        dist.all_reduce(reduced)
        world_size = dist.get_world_size()
        step_seconds, data_seconds = (reduced[-2:] / world_size).tolist()
        per_set = reduced[:-2].view(1 + len(self.sources), len(self.parts), 3)
        record = part_metrics(self.totals.as_dict(per_set[0]))
        for name, totals in zip(self.sources, per_set[1:], strict=True):
            if float(totals[:, NUM_PREDICTIONS].sum()) > 0:  # the source had batches this interval
                record[f"loss/{name}"] = part_metrics(self.totals.as_dict(totals))["loss"]
        record.update(throughput.rates(self.steps, step_seconds))
        record.update(data_wait_s=data_seconds / self.steps,
                      data_wait_share=data_seconds / max(step_seconds, 1e-9))
        self._reset()
        return record


def mixture_validation(records: dict[str, dict[str, float]], weights: dict[str, float],
                       lm_part: str) -> dict[str, float]:
    """One validation record per mixture source -> the mixture's: every metric averaged
    with the sources' (normalized) weights, i.e. its expected value under the training
    mix, val_perplexity from the averaged loss of the language-modelling part `lm_part`,
    and val_loss/<source> for each source."""
    total = sum(weights.values())
    first = next(iter(records.values()))
    record = {key: sum(source[key] * weights[name] / total for name, source in records.items())
              for key in first if key != "val_perplexity"}
    record["val_perplexity"] = perplexity(record[f"val_{lm_part}_loss"])
    record.update({f"val_loss/{name}": source["val_loss"] for name, source in records.items()})
    return record
