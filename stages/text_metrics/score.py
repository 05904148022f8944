"""One score of generated text, in the shape every other score in the reports has
(stages.evaluate.metrics.Score), plus the metric's own signature where it has one."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class TextScore:
    value: float                       # on the library's scale: BLEU and chrF 0-100, ROUGE 0-1
    ci95: tuple[float, float] | None   # None for a single example (nothing to resample)
    baseline: float | None
    baseline_kind: str                 # how the baseline was made, for people
    higher_is_better: bool = True
    signature: str = ""                # sacreBLEU's signature string; ROUGE: the scorer's settings

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
