"""What a GLUE task is: its files, its columns, its labels and how it is scored.

A spec is plain data so that the config validator can check task names without
importing torch (each task kind's spec sits in its own folder: squad/spec.py,
conll/spec.py, seq2seq/spec.py), and another GLUE-style task is one more spec in
glue/tasks.py.
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
    metrics:         metric names (see `stages.finetune.glue.metrics`); the first is the one
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
