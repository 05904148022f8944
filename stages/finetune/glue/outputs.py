"""What a GLUE task writes beside metrics.json in `<output_dir>/<task>/`.

    dev_predictions.tsv   index, prediction, label for every dev row (label strings); a T5's
                          also has the raw generation, and a generation that is no label
                          word (or no number) has the prediction <unreadable>, never a label
    <Name>.tsv            test predictions in GLUE submission format (index, prediction),
                          e.g. SST-2.tsv; the files of all tasks zip into a submission (the
                          server needs a label on every row: an unreadable generation is
                          written as the first label / 0.000 there, counted in metrics.json)
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

from stages.finetune.glue.examples import TaskExamples
from stages.finetune.glue.spec import TaskSpec

DEV_PREDICTIONS_NAME = "dev_predictions.tsv"
UNREADABLE = "<unreadable>"  # a T5 generation that is no label word / no number (class -1, score NaN)


def predictions_from_outputs(spec: TaskSpec, outputs: np.ndarray) -> np.ndarray:
    """Head outputs (N, num_labels) -> class ids (argmax) or regression scores (N,)."""
    if spec.is_regression:
        return outputs[:, 0].astype(np.float32)
    return outputs.argmax(axis=1)


def prediction_strings(spec: TaskSpec, predictions: np.ndarray) -> list[str]:
    """What the GLUE server expects: the label string for classes, the score for
    regression, clipped to the task's range (STS-B: 0-5) with three decimals; UNREADABLE
    for class -1 or a NaN score (a T5 generation that could not be read back)."""
    if spec.is_regression:
        if spec.score_range is not None:
            predictions = np.clip(predictions, *spec.score_range)
        return [UNREADABLE if np.isnan(score) else f"{score:.3f}" for score in predictions]
    return [UNREADABLE if i < 0 else spec.labels[i] for i in predictions]


def unreadable_rows(predictions: np.ndarray) -> np.ndarray:
    """(N,) bool: class -1 or a NaN score."""
    predictions = np.asarray(predictions)
    return np.isnan(predictions) if predictions.dtype.kind == "f" else predictions < 0


def write_dev_predictions(path: Path, spec: TaskSpec, dev: TaskExamples, predictions: np.ndarray,
                          generations: list[str] | None = None) -> None:
    """generations: a T5's raw generated texts, written as a fourth column."""
    columns = [dev.ids, prediction_strings(spec, predictions), prediction_strings(spec, dev.labels)]
    header = ["index", "prediction", "label"]
    if generations is not None:
        columns.append(generations)
        header.append("generation")
    _write_tsv(path, header, zip(*columns))


def write_submission(task_dir: Path, spec: TaskSpec, test: TaskExamples, predictions: np.ndarray) -> Path:
    """The GLUE server rejects a row without a label, so an unreadable prediction becomes
    class 0 / score 0.0 here (and only here: metrics.json counts them)."""
    path = Path(task_dir) / f"{spec.submission_name}.tsv"
    predictions = np.asarray(predictions)
    filled = np.where(unreadable_rows(predictions), 0, predictions).astype(predictions.dtype)
    _write_tsv(path, ["index", "prediction"], zip(test.ids, prediction_strings(spec, filled)))
    return path


def _write_tsv(path: Path, header: list[str], rows) -> None:
    with open(path, "w", encoding="utf-8", newline="") as f:
        writer = csv.writer(f, delimiter="\t", lineterminator="\n")
        writer.writerow(header)
        writer.writerows(rows)
