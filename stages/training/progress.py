"""Rank 0's progress as whole lines, one every N steps, that read the same in a pipe.

    progress = ProgressLines("[pretrain]", total=40, initial=0, unit="step", rate_unit="tokens")
    progress.update(1, amount=tokens_per_step, loss=7.33)   # prints at steps 5, 10, ..., 40
    progress.close()                                        # the last step, if not printed yet

    [pretrain] step 20/40 (50%)  loss 7.060  21.8k tokens/s  0:02 elapsed, ~0:02 left

A worker's output reaches the console through Ray, line by line (pipeline.worker_console):
a tqdm bar redrawn with carriage returns showed only 0% and 100% there. So a line is
printed every `every` steps (about ten per run: 1, 2 or 5 times a power of ten), and also
when `max_seconds` passed since the last one (a slow run still says it is alive), and at
the last step. The rate is measured between two lines, from the wall clock.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

LINES_PER_RUN = 10
MAX_SECONDS_BETWEEN_LINES = 60.0


def print_now(line: str) -> None:
    print(line, flush=True)  # a Ray worker's stdout is a pipe: unflushed, lines arrive late


def steps_between_lines(total: int, lines: int = LINES_PER_RUN) -> int:
    """The smallest of 1, 2, 5, 10, 20, 50, ... that prints at most about `lines` lines."""
    target = max(1, math.ceil(total / lines))
    magnitude = 10 ** (len(str(target)) - 1)
    for factor in (1, 2, 5, 10):
        if factor * magnitude >= target:
            return factor * magnitude
    raise AssertionError(target)  # 10 * magnitude >= target always


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


def _rate(per_second: float) -> str:
    for limit, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if per_second >= limit:
            return f"{per_second / limit:.1f}{suffix}"
    return f"{per_second:.1f}" if per_second < 100 else f"{per_second:.0f}"


class ProgressLines:
    """Counts steps from `initial` to `total` and prints a progress line when one is due."""

    def __init__(self, label: str, total: int, *, initial: int = 0, unit: str = "step",
                 rate_unit: str | None = None, every: int | None = None,
                 max_seconds: float = MAX_SECONDS_BETWEEN_LINES,
                 out: Callable[[str], object] = print_now, clock: Callable[[], float] = time.monotonic):
        self.label, self.total, self.done, self.initial = label, total, initial, initial
        self.unit, self.rate_unit = unit, rate_unit or f"{unit}s"
        self.every = every or steps_between_lines(total)
        self.max_seconds = max_seconds
        self.out, self.clock = out, clock
        self.started = self.last_time = clock()
        self.last_done = initial
        self.amount_since_line = 0.0
        self.fields: dict[str, float] = {}

    def update(self, steps: int = 1, *, amount: float | None = None, **fields: float | None) -> None:
        """`steps` more done; `amount` of the rate's unit with them (default: the steps);
        `fields` (loss=...) are shown on this and later lines until given again."""
        self.done += steps
        self.amount_since_line += steps if amount is None else amount
        self.fields.update({k: v for k, v in fields.items() if v is not None})
        now = self.clock()
        if (self.done % self.every == 0 or self.done >= self.total
                or now - self.last_time >= self.max_seconds):
            self._print(now)

    def close(self) -> None:
        """Prints the final count when the last line did not show it (a loop that ended early)."""
        if self.done != self.last_done:
            self._print(self.clock())

    def _print(self, now: float) -> None:
        percent = 100 * self.done / self.total if self.total else 100.0
        parts = [f"{self.label} {self.unit} {self.done}/{self.total} ({percent:.0f}%)"]
        parts += [f"{name} {value:.3f}" for name, value in self.fields.items()]
        interval = now - self.last_time
        if interval > 0 and self.amount_since_line:
            parts.append(f"{_rate(self.amount_since_line / interval)} {self.rate_unit}/s")
        elapsed = now - self.started
        timing = f"{_duration(elapsed)} elapsed"
        done_here = self.done - self.initial  # a resumed run's rate counts this session's steps
        if 0 < done_here and self.done < self.total:
            timing += f", ~{_duration(elapsed / done_here * (self.total - self.done))} left"
        parts.append(timing)
        self.out("  ".join(parts))
        self.last_time, self.last_done, self.amount_since_line = now, self.done, 0.0
