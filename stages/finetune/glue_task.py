"""One GLUE task in the finetune stage: read the TSVs, train on the workers, score, write files.

Writes into `<output_dir>/<task>/` (see `stages.finetune.outputs`): metrics.json (the
task's GLUE metrics on the dev set and run facts), dev_predictions.tsv and the test
predictions in GLUE submission format (e.g. SST-2.tsv).
"""

from __future__ import annotations

import time
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from stages.finetune.best_checkpoint import best_epoch_facts
from stages.finetune.config import FinetuneConfig
from stages.finetune.encode import encode_texts, load_task_tokenizer
from stages.finetune.metrics import compute_metrics
from stages.finetune.outputs import (
    DEV_PREDICTIONS_NAME, predictions_from_outputs, write_dev_predictions, write_submission, write_task_metrics,
)
from stages.finetune.prepared import PreparedTask
from stages.finetune.tasks import TaskSpec
from stages.finetune.tasks.tsv import read_split
from stages.finetune.worker import OUTPUTS_NAME


def finetune_glue(spec: TaskSpec, cfg: FinetuneConfig, *, seed: int, source: dict[str, Any],
                  data_dir: Path, task_dir: Path, storage_path: Path, metrics_log,
                  tracking: dict[str, Any] | None = None) -> dict[str, Any]:
    """Train, predict and write one GLUE task's outputs; returns what metrics.json holds."""
    from stages.finetune.run import train_prepared_task

    started = time.perf_counter()
    prepared = prepare_glue(spec, cfg, source=source, data_dir=data_dir, seed=seed)
    splits, to_predictions = prepared.data["splits"], prepared.data["predictions"]
    print(f"[finetune] {spec.name}: {prepared.description}; training on {cfg.num_workers} workers", flush=True)

    result = train_prepared_task(spec, cfg, seed=seed, source=source, prepared=prepared, task_dir=task_dir,
                                 storage_path=storage_path, metrics_log=metrics_log, tracking=tracking)

    with np.load(task_dir / OUTPUTS_NAME) as outputs:
        scores = prepared.scorers["dev"](outputs["dev"])
        dev_predictions = to_predictions(outputs["dev"])
        test_predictions = to_predictions(outputs["test"])
    write_dev_predictions(task_dir / DEV_PREDICTIONS_NAME, spec, splits["dev"], dev_predictions)
    write_submission(task_dir, spec, splits["test"], test_predictions)

    metrics = {
        **scores,
        "train_examples": len(splits["train"]), "dev_examples": len(splits["dev"]),
        "test_examples": len(splits["test"]), "epochs": cfg.epochs,
        **best_epoch_facts(task_dir, cfg.keep_best),
        "steps": int(result.metrics.get("step", 0)) if result.metrics else 0,
        "seconds": round(time.perf_counter() - started, 2),
    }
    write_task_metrics(task_dir, {"task": spec.name, "primary_metric": spec.metrics[0], **metrics})
    print(f"[finetune] {spec.name}: dev {spec.metrics[0]}={scores[spec.metrics[0]]:.4f} "
          f"in {metrics['seconds']:.1f}s", flush=True)
    return metrics


def prepare_glue(spec: TaskSpec, cfg: FinetuneConfig, *, source: dict[str, Any], data_dir: Path,
                 seed: int) -> PreparedTask:
    """Seeded train/dev subsets and the full test split, tokenized for the model; for a
    T5, as text to text (`stages.finetune.text_to_text`). data: {"splits": TaskExamples
    per split, "predictions": head outputs -> class ids or scores}."""
    tokenizer = load_task_tokenizer(source["tokenizer"], cfg.max_seq_len)
    if cfg.source == "hub":
        from stages.finetune.hub import read_glue_split

        read = partial(read_glue_split, spec)
    else:
        read = partial(read_split, spec, data_dir)
    splits = {
        "train": read("train").sample(cfg.max_train_examples, seed),
        "dev": read("dev").sample(cfg.max_eval_examples, seed),
        "test": read("test"),
    }
    if source.get("family") == "t5":
        from stages.finetune import text_to_text

        encode = partial(text_to_text.encode_text_to_text, tokenizer, spec)
        score = partial(text_to_text.text_to_text_scores, spec, source["tokenizer"])
        predictions = partial(text_to_text.file_predictions, spec, source["tokenizer"])
    else:
        encode, score = partial(encode_texts, tokenizer), partial(glue_scores, spec)
        predictions = partial(predictions_from_outputs, spec)
    return PreparedTask(
        encoded={split: encode(ex.texts, ex.labels) for split, ex in splits.items()},
        scorers={"dev": partial(score, splits["dev"].labels)},
        predict_splits=("dev", "test"), data={"splits": splits, "predictions": predictions},
        description=f"{len(splits['train'])} train, {len(splits['dev'])} dev, {len(splits['test'])} test examples")


def glue_scores(spec: TaskSpec, labels: np.ndarray, outputs: np.ndarray) -> dict[str, float]:
    """Head outputs (N, num_labels) -> the task's GLUE metrics. Rank 0 scores each
    epoch's dev predictions with it, the driver the final ones."""
    return compute_metrics(spec.metrics, predictions_from_outputs(spec, outputs), labels)
