"""Every metric a run logs in its metrics.jsonl files, as the runs page draws it, read
incrementally: `pretrain dashboard ROOT` keeps one `RunSeries` per run and reads only the
bytes appended since the last poll, so a poll of 200 runs of 20,000 steps parses the new
lines, not 4 million old ones.

Series: pretraining metrics under their own names (loss, val_loss, lr, grad_norm,
tokens_per_s, mfu, ...), fine-tuning ones as `finetune/<task>/<metric>`. Each point is
(step, value, seconds since the run's first record) and carries the sequence number of
the record it came from: a client that holds the points up to sequence n asks for the
ones after n (`payload(after=n)`).

A metric keeps at most 2 x KEEP points: every stride-th one (the stride doubles when
that fills up, dropping every other point), plus the latest one, always sent. Picking,
not averaging, as TensorBoard's reservoir does: a spike stays a spike. A step logged
again (a resumed run re-logs the steps after its checkpoint; the last record of a step
wins, as in `stages.report.curves`) or a file that shrank (rewritten on resume) starts
a new epoch: the client then drops what it holds and takes everything again.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from stages.report import METRICS_FILE

KEEP = 500             # points a metric keeps at least (a 600-pixel plot needs no more)
NOT_METRICS = ("step", "time", "epoch", "task")
SIGNIFICANT = "{:.6g}"  # values on the wire: 6 digits are more than a plot shows


class MetricPoints:
    """One metric's kept points (every stride-th) and its latest point."""

    def __init__(self) -> None:
        self.steps: list[int] = []
        self.values: list[float] = []
        self.seconds: list[float] = []
        self.seqs: list[int] = []
        self.stride = 1
        self.seen = 0  # points offered so far (the index of the next one)
        self.last: tuple[int, float, float, int] | None = None

    def add(self, step: int, value: float, seconds: float, seq: int) -> bool:
        """False when `step` was logged before (the caller starts a new epoch)."""
        rewound = self.last is not None and step <= self.last[0]
        if rewound:
            cut = next((i for i, s in enumerate(self.steps) if s >= step), len(self.steps))
            del self.steps[cut:], self.values[cut:], self.seconds[cut:], self.seqs[cut:]
            self.seen = len(self.steps) * self.stride
        if self.seen % self.stride == 0:
            self.steps.append(step)
            self.values.append(value)
            self.seconds.append(seconds)
            self.seqs.append(seq)
        self.seen += 1
        self.last = (step, value, seconds, seq)
        if len(self.steps) > 2 * KEEP:  # kept indices are multiples of the stride: keep every other
            self.stride *= 2
            self.steps, self.values = self.steps[::2], self.values[::2]
            self.seconds, self.seqs = self.seconds[::2], self.seqs[::2]
        return not rewound

    def after(self, seq: int) -> dict[str, list]:
        """The kept points from records after `seq`, and the latest point if it is newer."""
        start = len(self.seqs)
        while start > 0 and self.seqs[start - 1] > seq:
            start -= 1
        steps, values, seconds = self.steps[start:], self.values[start:], self.seconds[start:]
        if self.last is not None and self.last[3] > seq and (not steps or steps[-1] != self.last[0]):
            steps, values, seconds = steps + [self.last[0]], values + [self.last[1]], seconds + [self.last[2]]
        return {"step": steps, "value": [_round(v) for v in values], "time": [round(s, 1) for s in seconds]}


class MetricsFile:
    """The part of one metrics.jsonl read so far: where to go on, and a torn last line."""

    def __init__(self, path: Path, prefix_of) -> None:
        self.path = path
        self.prefix_of = prefix_of  # record -> the name prefix of its metrics, or None to skip it
        self.offset = 0
        self.identity: tuple[int, int] | None = None  # (device, inode): a rewritten file is another

    def new_records(self) -> tuple[list[dict[str, Any]], bool]:
        """(the records appended since the last call, whether the file was replaced or
        shrank: everything read before is void)."""
        try:
            stat = os.stat(self.path)
        except OSError:
            return [], False
        identity = (stat.st_dev, stat.st_ino)
        restarted = self.identity is not None and (identity != self.identity or stat.st_size < self.offset)
        if restarted:
            self.offset = 0
        self.identity = identity
        if stat.st_size == self.offset:
            return [], restarted
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            chunk = f.read(stat.st_size - self.offset)
        end = chunk.rfind(b"\n") + 1  # a line being written is read when it is whole
        self.offset += end
        records = []
        for line in chunk[:end].splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                continue  # a torn line from a killed writer
            if isinstance(record, dict):
                records.append(record)
        return records, restarted


class RunSeries:
    """Every metric of one run, from its pretrain and finetune metrics.jsonl."""

    def __init__(self) -> None:
        self.files: dict[Path, MetricsFile] = {}
        self.reset()
        self.epoch = 0

    def reset(self) -> None:
        self.metrics: dict[str, MetricPoints] = {}
        self.seq = 0
        self.started: float | None = None
        self.tokens_per_sample: float | None = None
        for file in self.files.values():
            file.offset = 0

    def update(self, pretrain_dir: Path | None, finetune_dir: Path | None) -> None:
        """Read what the run's files gained since the last call."""
        wanted = {}
        if pretrain_dir is not None:
            wanted[Path(pretrain_dir) / METRICS_FILE] = _pretrain_prefix
        if finetune_dir is not None:
            wanted[Path(finetune_dir) / METRICS_FILE] = _finetune_prefix
        if set(wanted) != set(self.files):  # a stage started again under a new fingerprint
            self.files = {path: self.files.get(path) or MetricsFile(path, prefix) for path, prefix in wanted.items()}
            self._restart()
        for _ in range(2):  # a restart reads every file again, from the top
            batches, restarted = [], False
            for file in self.files.values():
                records, void = file.new_records()
                batches.append((file, records))
                restarted |= void
            if not restarted:
                break
            self._restart()
        for file, records in batches:
            for record in records:
                self._add(record, file.prefix_of(record))

    def _restart(self) -> None:
        self.reset()
        self.epoch += 1

    def _add(self, record: dict[str, Any], prefix: str | None) -> None:
        step = record.get("step")
        if prefix is None or not isinstance(step, int) or isinstance(step, bool):
            return
        self.seq += 1
        time = record.get("time")
        if _is_number(time) and prefix == "" and self.started is None:
            self.started = float(time)
        seconds = float(time) - self.started if _is_number(time) and self.started is not None else 0.0
        tokens, samples = record.get("tokens_per_s"), record.get("samples_per_s")
        if prefix == "" and _is_number(tokens) and _is_number(samples) and samples > 0:
            self.tokens_per_sample = tokens / samples
        for key, value in record.items():
            if key in NOT_METRICS or not _is_number(value):
                continue
            points = self.metrics.get(prefix + key)
            if points is None:
                points = self.metrics[prefix + key] = MetricPoints()
            if not points.add(step, float(value), seconds, self.seq):
                self.epoch += 1  # the client's copy holds steps that are void now

    def names(self) -> list[str]:
        return sorted(self.metrics)

    def payload(self, metrics: list[str] | None, *, after: int = 0, samples_per_step: int | None = None
                ) -> dict[str, Any]:
        """{"epoch", "cursor" (ask for points after it next time), "names" (every metric
        logged), "tokens_per_step" (None: unknown), "metrics": {name: {"step", "value",
        "time"}}} with the points of `metrics` (None: all) after `after`; a metric not
        logged yet comes empty (the client holds it from now on: its points come later)."""
        picked = self.names() if metrics is None else list(dict.fromkeys(metrics))
        tokens_per_step = (round(samples_per_step * self.tokens_per_sample)
                           if samples_per_step and self.tokens_per_sample else None)
        return {"epoch": self.epoch, "cursor": self.seq, "names": self.names(), "tokens_per_step": tokens_per_step,
                "metrics": {name: self.metrics[name].after(after) if name in self.metrics
                            else {"step": [], "value": [], "time": []} for name in picked}}


def read_run_series(pretrain_dir: Path | None, finetune_dir: Path | None, samples_per_step: int | None = None
                    ) -> dict[str, Any]:
    """Every metric of a run at once (sweep.html, written once)."""
    series = RunSeries()
    series.update(pretrain_dir, finetune_dir)
    return series.payload(None, samples_per_step=samples_per_step)


def samples_per_step(pretrain_config: dict[str, Any]) -> int | None:
    """Sequences per optimizer step (stages/pretrain/train_loop.py): micro batch x
    accumulation x workers; None when the config lacks one of them."""
    keys = ("micro_batch_size", "gradient_accumulation_steps", "num_workers")
    values = [pretrain_config.get(key) for key in keys]
    if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in values):
        return None
    return values[0] * values[1] * values[2]


def _pretrain_prefix(record: dict[str, Any]) -> str | None:
    return "" if "task" not in record else None


def _finetune_prefix(record: dict[str, Any]) -> str | None:
    return f"finetune/{record['task']}/" if "task" in record else None


def _round(value: float) -> float:
    return float(SIGNIFICANT.format(value))


def _is_number(value: Any) -> bool:
    # NaN/inf (a diverged step) cannot be plotted; JSON has no word for them either.
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
