"""What a finished task leaves in `<output_dir>/<task>/`, written by the driver.

    metrics.json          scores on the full dev set, each with its baseline and 95% interval
                          (`stages.finetune.score_context`: "accuracy", "accuracy_baseline",
                          "accuracy_ci95_low", "accuracy_ci95_high", "score_notes"), warnings,
                          and run facts; written last, atomically: its presence is what marks
                          the task finished
    predictions           the task's own files, written by its family (GLUE's dev
                          predictions and submission: `stages.finetune.glue.outputs`)
    model_outputs.npz     raw head outputs for the predicted splits (written by rank 0 of
                          the Ray Train run, `stages.finetune.worker`; read by the driver)
    model/                fine-tuned weights (rank 0; see stages.finetune.saved_model)
    hf/                   the same model as its transformers class, written by the driver
                          before metrics.json (stages.finetune.hf_export)
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

METRICS_NAME = "metrics.json"
OUTPUTS_NAME = "model_outputs.npz"  # raw head outputs per row, flattened: {"dev": (N, k), ...}


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
