"""What a finished task leaves in `<output_dir>/<task>/`, written by the driver.

    metrics.json          scores on the full dev set and run facts; written last, atomically:
                          its presence is what marks the task finished
    dev_predictions.tsv   index, prediction, label for every dev row (label strings)
    <Name>.tsv            test predictions in GLUE submission format (index, prediction),
                          e.g. SST-2.tsv; the files of all tasks zip into a submission
    model_outputs.npz     raw head outputs for dev and test (written by rank 0)
    model/                fine-tuned weights (rank 0; see stages.finetune.saved_model)
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
    regression, clipped to the task's range (STS-B: 0-5) with three decimals."""
    if spec.is_regression:
        if spec.score_range is not None:
            predictions = np.clip(predictions, *spec.score_range)
        return [f"{score:.3f}" for score in predictions]
    return [spec.labels[i] for i in predictions]


def write_dev_predictions(path: Path, spec: TaskSpec, dev: TaskExamples, predictions: np.ndarray) -> None:
    _write_tsv(path, ["index", "prediction", "label"],
               zip(dev.ids, prediction_strings(spec, predictions), prediction_strings(spec, dev.labels)))


def write_submission(task_dir: Path, spec: TaskSpec, test: TaskExamples, predictions: np.ndarray) -> Path:
    path = Path(task_dir) / f"{spec.submission_name}.tsv"
    _write_tsv(path, ["index", "prediction"], zip(test.ids, prediction_strings(spec, predictions)))
    return path


def _write_tsv(path: Path, header: list[str], rows) -> None:
    with open(path, "w", encoding="utf-8", newline="") as f:
        writer = csv.writer(f, delimiter="\t", lineterminator="\n")
        writer.writerow(header)
        writer.writerows(rows)
