"""Learning-rate schedule: linear warmup, then cosine or linear decay to a floor, a
constant rate, or the inverse square root decay of "Attention Is All You Need".

    lr_lambda = WarmupDecaySchedule(warmup_steps=20, max_steps=200, decay="cosine")
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda)

The schedule is a multiplier of the optimizer's base lr as a function of the number of
optimizer steps already taken. It is a small class rather than a closure so that it
pickles (Ray ships it to workers) and so that LambdaLR's state_dict records its
settings alongside the step count.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

DECAYS = ("cosine", "linear", "constant", "inverse_sqrt")


@dataclass(frozen=True)
class WarmupDecaySchedule:
    """multiplier(step):
    - step < warmup_steps: (step + 1) / warmup_steps, so the first update is already
      non-zero and step warmup_steps - 1 reaches the full rate;
    - then decays from 1 to min_lr_ratio at max_steps (cosine or linear), or stays at 1
      (constant); after max_steps it holds min_lr_ratio;
    - inverse_sqrt (Vaswani et al. 2017, sec. 5.3, normalised to peak 1): with n = step + 1,
      min(n / warmup_steps, sqrt(warmup_steps / n)). It shares the warmup ramp above, then
      falls as 1/sqrt(n) with no end point: max_steps and min_lr_ratio do not apply, so a
      run can be extended without changing the rates it already used.
    A warmup longer than max_steps is allowed (a quick `-o pretrain.max_steps=10` run keeps
    the configured warmup): training then ends before the peak.
    """

    warmup_steps: int
    max_steps: int
    decay: str = "cosine"
    min_lr_ratio: float = 0.1

    def __post_init__(self) -> None:
        if self.decay not in DECAYS:
            raise ValueError(f"decay must be one of {DECAYS}, got {self.decay!r}")
        if self.warmup_steps < 0 or self.max_steps < 1:
            raise ValueError(
                f"need warmup_steps >= 0 and max_steps >= 1, got {self.warmup_steps}, "
                f"{self.max_steps}"
            )
        if self.decay == "inverse_sqrt" and self.warmup_steps < 1:
            raise ValueError(
                "the inverse_sqrt schedule needs warmup_steps >= 1 (its peak is at the end of "
                "warmup, the rate there is the configured lr); got 0"
            )
        if not 0.0 <= self.min_lr_ratio <= 1.0:
            raise ValueError(f"min_lr_ratio must be in [0, 1], got {self.min_lr_ratio}")

    def __call__(self, step: int) -> float:
        if step < self.warmup_steps:
            return (step + 1) / self.warmup_steps
        if self.decay == "constant":
            return 1.0
        if self.decay == "inverse_sqrt":
            return math.sqrt(self.warmup_steps / (step + 1))
        decay_steps = max(1, self.max_steps - self.warmup_steps)
        progress = min(1.0, (step - self.warmup_steps) / decay_steps)  # 0 -> 1
        if self.decay == "cosine":
            shape = 0.5 * (1.0 + math.cos(math.pi * progress))  # 1 -> 0
        else:
            shape = 1.0 - progress
        return self.min_lr_ratio + (1.0 - self.min_lr_ratio) * shape
