"""Read one split of a GLUE-style task from its official TSV file.

GLUE files are tab-separated with no quoting: fields contain unbalanced `"` (QNLI dev,
MRPC), so they are read with `csv.QUOTE_NONE`; the default dialect would swallow tabs
and newlines up to the next quote and silently merge rows.
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

from stages.finetune.glue.examples import TaskExamples
from stages.finetune.glue.spec import TaskSpec

GLUE_SUBDIR = "glue_data"


class TaskDataError(ValueError):
    """A task file does not match the task's layout; the message names file and line."""


def split_path(spec: TaskSpec, data_dir: str | Path, split: str) -> Path:
    if split not in spec.files:
        raise ValueError(f"task {spec.name!r} has no split {split!r}; it has {sorted(spec.files)}")
    return Path(data_dir) / GLUE_SUBDIR / spec.directory / spec.files[split].name


def read_split(spec: TaskSpec, data_dir: str | Path, split: str) -> TaskExamples:
    """All rows of `split` ("train", "dev" or "test"); test has ids but no labels."""
    path = split_path(spec, data_dir, split)
    if not path.is_file():
        raise FileNotFoundError(
            f"{path}: not found (task {spec.name!r}, split {split!r}). Put the official GLUE "
            f"download (download_glue_data.py layout) under <data_dir>/{GLUE_SUBDIR}/, or point "
            f"experiment.data_dir at the folder that holds {GLUE_SUBDIR}/."
        )
    file = spec.files[split]
    has_labels = split != "test"
    label_ids = None if spec.labels is None else {label: i for i, label in enumerate(spec.labels)}

    texts: list[tuple[str, ...]] = []
    labels: list[float | int] = []
    ids: list[str] = []
    # utf-8-sig: MRPC files start with a byte-order mark that would otherwise stick to
    # the first header name.
    with open(path, encoding="utf-8-sig", newline="") as f:
        reader = csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
        header = list(file.columns) if file.columns is not None else next(reader, [])
        needed = [*spec.text_columns, spec.label_column if has_labels else spec.index_column]
        _check_header(path, spec, header, needed, from_file=file.columns is None)
        text_at = [header.index(c) for c in spec.text_columns]
        label_at = header.index(spec.label_column) if has_labels else None
        id_at = header.index(spec.index_column) if spec.index_column in header else None

        for row in reader:
            if not row:  # a blank (usually trailing) line is not an example
                continue
            line = reader.line_num  # exact: QUOTE_NONE never spans lines
            if len(row) != len(header):
                raise TaskDataError(
                    f"{path}:{line}: expected {len(header)} tab-separated columns "
                    f"({', '.join(header)}), found {len(row)}. A tab inside a field or a "
                    f"truncated row; use the unmodified file from the GLUE download."
                )
            # Surrounding spaces are an artefact of GLUE's tokenised text ("journey . "),
            # not content; stripping keeps them from becoming tokens of their own.
            texts.append(tuple(row[i].strip() for i in text_at))
            ids.append(row[id_at] if id_at is not None else str(len(ids)))
            if label_at is not None:
                labels.append(_parse_label(path, line, spec, row[label_at], label_ids))

    if not texts:
        raise TaskDataError(f"{path}: no examples after the header; the file is empty or truncated.")
    label_array = None
    if has_labels:
        label_array = np.asarray(labels, dtype=np.float32 if spec.is_regression else np.int64)
    return TaskExamples(texts=texts, labels=label_array, ids=ids)


def _check_header(path: Path, spec: TaskSpec, header: list[str], needed: list[str], from_file: bool):
    missing = [c for c in needed if c not in header]
    if missing:
        where = f"{path}:1: header" if from_file else f"{path}: the spec's column list"
        raise TaskDataError(
            f"{where} has columns {header}, but task {spec.name!r} needs {missing}. "
            f"Is this the {spec.directory} file from the GLUE download?"
        )


def _parse_label(path: Path, line: int, spec: TaskSpec, raw: str, label_ids: dict[str, int] | None):
    if label_ids is None:
        try:
            return float(raw)
        except ValueError:
            raise TaskDataError(
                f"{path}:{line}: {spec.label_column}={raw!r} is not a number; task {spec.name!r} "
                f"is a regression task. Fix or remove this row."
            ) from None
    if raw not in label_ids:
        raise TaskDataError(
            f"{path}:{line}: {spec.label_column}={raw!r} is not a label of task {spec.name!r} "
            f"(valid: {', '.join(spec.labels)}). Fix or remove this row, or check that the file "
            f"belongs to {spec.directory}."
        )
    return label_ids[raw]
