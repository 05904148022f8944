"""What a SQuAD task is (plain data, light: the config validator checks names with it),
and the two built-in ones.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, kw_only=True)
class SquadSpec:
    """Extractive QA from the official SQuAD JSON under `<data_dir>/<directory>/`. Without
    the train file, the dev file is split by article (finetune.squad_eval_fraction)."""

    name: str
    version: str  # "1.1" or "2.0" (questions without an answer, a null-answer threshold)
    directory: str = "squad"
    train_file: str
    dev_file: str
    metrics: tuple[str, ...] = ("f1", "exact_match")
    description: str = ""
    head = "span_extraction"

    def required_paths(self, data_dir: str | Path) -> list[Path]:
        return [Path(data_dir) / self.directory / self.dev_file]

    def input_paths(self, data_dir: str | Path) -> list[Path]:
        """Every file the task may read (the train file only where it exists)."""
        return [Path(data_dir) / self.directory / self.train_file, *self.required_paths(data_dir)]


SQUAD_TASKS = {
    spec.name: spec
    for spec in [
        SquadSpec(name="squad", version="1.1", train_file="train-v1.1.json", dev_file="dev-v1.1.json",
                  description="extractive question answering, every question has an answer"),
        SquadSpec(name="squad_v2", version="2.0", train_file="train-v2.0.json", dev_file="dev-v2.0.json",
                  description="extractive question answering with unanswerable questions"),
    ]
}
