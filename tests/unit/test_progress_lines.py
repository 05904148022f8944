"""Rank 0's progress lines (stages/training/progress.py): in a pipe, where a tqdm bar showed
only 0% and 100%, a whole line every N steps with the step, the loss and tokens/s."""

from __future__ import annotations

import pytest

from stages.training.progress import ProgressLines, steps_between_lines


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def run(total: int, *, initial: int = 0, step_seconds: float = 0.1, tokens_per_step: int = 1024,
        **options) -> list[str]:
    lines: list[str] = []
    clock = Clock()
    progress = ProgressLines("[pretrain]", total, initial=initial, rate_unit="tokens", out=lines.append,
                             clock=clock, **options)
    for step in range(initial + 1, total + 1):
        clock.now += step_seconds
        progress.update(1, amount=tokens_per_step, loss=8.0 - step / 10 if step % 10 == 0 else None)
    progress.close()
    return lines


@pytest.mark.parametrize("total, every", [(1, 1), (8, 1), (40, 5), (100, 10), (101, 20), (2000, 200),
                                          (30000, 5000)])
def test_about_ten_lines_per_run_at_round_steps(total, every):
    assert steps_between_lines(total) == every


def test_a_line_every_n_steps_with_step_loss_and_tokens_per_second():
    lines = run(40)
    assert [line.split()[2] for line in lines] == [f"{s}/40" for s in range(5, 41, 5)]
    assert lines[0] == "[pretrain] step 5/40 (12%)  10.2k tokens/s  0:00 elapsed, ~0:04 left"
    # the loss as last reported (every 10 steps here), until the next report
    assert "loss 7.000" in lines[1] and "loss 7.000" in lines[2] and "loss 6.000" in lines[3]
    assert lines[-1] == "[pretrain] step 40/40 (100%)  loss 4.000  10.2k tokens/s  0:04 elapsed"


def test_the_rate_is_measured_between_two_lines():
    lines: list[str] = []
    clock = Clock()
    progress = ProgressLines("[pretrain]", 10, every=5, rate_unit="tokens", out=lines.append, clock=clock)
    for seconds in (1, 1, 1, 1, 1, 4, 4, 4, 4, 4):  # 5 steps in 5 s, then 5 in 20 s
        clock.now += seconds
        progress.update(1, amount=100)
    assert "  100 tokens/s" in lines[0] and "  25.0 tokens/s" in lines[1]


def test_a_slow_run_still_prints_every_max_seconds():
    lines = run(40, step_seconds=25.0, max_seconds=60.0)
    steps = [int(line.split()[2].split("/")[0]) for line in lines]
    assert steps == [3, 5, 8, 10, 13, 15, 18, 20, 23, 25, 28, 30, 33, 35, 38, 40]


def test_a_resumed_run_counts_from_its_checkpoint_and_estimates_from_this_session():
    lines = run(40, initial=20)
    assert lines[0].startswith("[pretrain] step 25/40 (62%)")
    assert lines[0].endswith("0:00 elapsed, ~0:02 left")  # 15 steps left at 0.1 s, not 40 s / 25 steps
    assert len(lines) == 4


def test_close_prints_where_a_loop_that_ended_early_stopped():
    lines: list[str] = []
    progress = ProgressLines("[finetune] sst2:", 8, every=5, unit="batch", out=lines.append, clock=Clock())
    for _ in range(7):
        progress.update(1)
    progress.close()
    progress.close()  # nothing new: no second line
    assert [line.split()[3] for line in lines] == ["5/8", "7/8"]
    assert lines[0].startswith("[finetune] sst2: batch 5/8 (62%)")
