"""What a CoNLL task is (plain data, light: the config validator checks names with it),
and the built-in CoNLL-2003.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from stages.finetune.conll.reader import CONLL_LABELS


@dataclass(frozen=True, kw_only=True)
class ConllSpec:
    """Named entities from CoNLL column files under `<data_dir>/<directory>/`."""

    name: str
    directory: str
    files: dict[str, str]  # split -> file name ("train", "dev", "test")
    labels: tuple[str, ...]  # IOB2 tags in class-id order
    metrics: tuple[str, ...] = ("f1", "precision", "recall")
    description: str = ""
    head = "token_classification"

    @property
    def num_labels(self) -> int:
        return len(self.labels)

    def required_paths(self, data_dir: str | Path) -> list[Path]:
        return [Path(data_dir) / self.directory / name for name in self.files.values()]

    def input_paths(self, data_dir: str | Path) -> list[Path]:
        """Every file the task reads (their contents join the task's fingerprint)."""
        return self.required_paths(data_dir)


CONLL_TASKS = {
    spec.name: spec
    for spec in [
        ConllSpec(name="conll2003", directory="conll2003",
                  files={"train": "train.txt", "dev": "valid.txt", "test": "test.txt"},
                  labels=CONLL_LABELS, description="named entities PER, ORG, LOC, MISC (IOB2)"),
    ]
}
