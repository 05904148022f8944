"""What a finished task leaves in `<output_dir>/<task>/`, written by the driver.

    metrics.json          scores on the full dev set, each with its baseline and 95% interval
                          (`stages.finetune.score_context`: "accuracy", "accuracy_baseline",
                          "accuracy_ci95_low", "accuracy_ci95_high", "score_notes"), warnings,
                          and run facts; written last, atomically: its presence is what marks
                          the task finished
    dev_predictions.tsv   index, prediction, label for every dev row (label strings); a T5's
                          also has the raw generation, and a generation that is no label
                          word (or no number) has the prediction <unreadable>, never a label
    <Name>.tsv            test predictions in GLUE submission format (index, prediction),
                          e.g. SST-2.tsv; the files of all tasks zip into a submission (the
                          server needs a label on every row: an unreadable generation is
                          written as the first label / 0.000 there, counted in metrics.json)
    model_outputs.npz     raw head outputs for the predicted splits (written by rank 0 of
                          the Ray Train run, `stages.finetune.worker`; read by the driver)
    model/                fine-tuned weights (rank 0; see stages.finetune.saved_model)
    hf/                   the same model as its transformers class, written by the driver
                          before metrics.json (stages.finetune.hf_export)
"""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from stages.finetune.tasks import TaskSpec
from stages.finetune.tasks.examples import TaskExamples

METRICS_NAME = "metrics.json"
DEV_PREDICTIONS_NAME = "dev_predictions.tsv"
OUTPUTS_NAME = "model_outputs.npz"  # raw head outputs per row, flattened: {"dev": (N, k), ...}
UNREADABLE = "<unreadable>"  # a T5 generation that is no label word / no number (class -1, score NaN)


def is_task_finished(task_dir: Path) -> bool:
    return (Path(task_dir) / METRICS_NAME).is_file()


def read_task_metrics(task_dir: Path) -> dict[str, Any]:
    return json.loads((Path(task_dir) / METRICS_NAME).read_text(encoding="utf-8"))


def write_task_metrics(task_dir: Path, metrics: dict[str, Any]) -> Path:
    """Temp file, fsync, rename: a crash leaves no metrics.json or a complete one, never
    a half-written file that would make an unfinished task look finished."""
    path = Path(task_dir) / METRICS_NAME
    temp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(temp, "w", encoding="utf-8") as f:
        json.dump(metrics, f, indent=2, sort_keys=True)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(temp, path)
    return path


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
