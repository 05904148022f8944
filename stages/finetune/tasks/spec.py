"""What a fine-tuning task is: its files, its columns, its labels and how it is scored.

A spec is plain data so that the config validator can check task names without
importing torch, and so that a new task (another GLUE task, SQuAD, CoNLL) is a new
spec plus, at most, a new reader.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, kw_only=True)
class TsvFile:
    """One split's file inside the task directory.

    columns: None when the file's first line is a header (the usual GLUE layout); the
             column names when the file has no header (CoLA train/dev), so that the
             reader can address every file by column name.
    """

    name: str
    columns: tuple[str, ...] | None = None


@dataclass(frozen=True, kw_only=True)
class TaskSpec:
    """A sentence or sentence-pair task read from GLUE-style TSV files.

    name:            the key users write in `finetune.tasks` ("sst2")
    directory:       folder under `<data_dir>/glue_data/` ("SST-2")
    files:           split name ("train", "dev", "test") -> file
    text_columns:    one column (single sentence) or two (a pair), same names in every split
    label_column:    column holding the gold label in train/dev (test has none)
    index_column:    test-file column with the example id written to the submission
    labels:          the label strings in class-id order; None for regression (STS-B)
    score_range:     regression only: the valid score range, predictions are clipped to it
    metrics:         metric names (see `stages.finetune.metrics`); the first is the one
                     GLUE ranks by
    submission_name: file name stem the GLUE server expects (`SST-2.tsv`)
    description:     one line saying what the task asks, for listings and reports
    """

    name: str
    directory: str
    files: dict[str, TsvFile]
    text_columns: tuple[str, ...]
    label_column: str
    index_column: str = "index"
    labels: tuple[str, ...] | None
    score_range: tuple[float, float] | None = None
    metrics: tuple[str, ...]
    submission_name: str
    description: str = ""

    head = "sequence_classification"

    def required_paths(self, data_dir: str | Path) -> list[Path]:
        return [Path(data_dir) / "glue_data" / self.directory / file.name for file in self.files.values()]

    def input_paths(self, data_dir: str | Path) -> list[Path]:
        """Every file the task reads (their contents join the task's fingerprint)."""
        return self.required_paths(data_dir)

    @property
    def is_regression(self) -> bool:
        return self.labels is None

    @property
    def num_labels(self) -> int:
        """Output width of the head: one score for regression, else one logit per class."""
        return 1 if self.labels is None else len(self.labels)


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
