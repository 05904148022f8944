"""The finetune stage: one Ray Train + DeepSpeed run per task on the pretrained model.

    metrics = run(ctx)     # {"sst2/accuracy": 0.71, "sst2/train_examples": 2000, ...}

For each task in `finetune.tasks`, in order: read the task's files, tokenize them with
the pretraining tokenizer, fine-tune `GPTForSequenceClassification` on the workers
(`stages.finetune.worker`), then score the full dev set and write predictions (see
`stages.finetune.outputs` for the files). A task whose `metrics.json` exists is done and
is skipped, so a re-run after an interruption continues with the next task; a task cut
off mid-training resumes from its last epoch checkpoint under `<output_dir>/ray/<task>`.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from stages.finetune.config import FinetuneConfig
from stages.finetune.encode import EncodedSplit, encode_texts, load_task_tokenizer
from stages.finetune.metrics import compute_metrics
from stages.finetune.outputs import (
    DEV_PREDICTIONS_NAME, is_task_finished, predictions_from_outputs, read_task_metrics,
    write_dev_predictions, write_submission, write_task_metrics,
)
from stages.finetune.saved_model import TOKENIZER_NAME
from stages.finetune.tasks import TaskSpec, get_task
from stages.finetune.tasks.tsv import read_split, split_path
from stages.finetune.worker import OUTPUTS_NAME, finetune_worker

RAY_STORAGE_DIR = "ray"  # the engine keeps it out of the manifest (scratch_dirs)


def run(ctx) -> dict[str, Any]:
    cfg: FinetuneConfig = ctx.config
    seed = cfg.seed if cfg.seed is not None else ctx.experiment.seed
    # Absolute paths: Ray Train workers run in their own working directories.
    pretrained_dir = Path(ctx.inputs["pretrain"]).resolve() / "model"
    output_dir = Path(ctx.output_dir).resolve()
    data_dir = ctx.experiment.resolved_data_dir
    check_task_files([get_task(name) for name in cfg.tasks if not is_task_finished(output_dir / name)],
                     data_dir)
    results: dict[str, Any] = {}
    for name in cfg.tasks:
        task_dir = output_dir / name
        if is_task_finished(task_dir):
            print(f"[finetune] {name}: already finished ({task_dir / 'metrics.json'}), skipped", flush=True)
            metrics = read_task_metrics(task_dir)
        else:
            metrics = finetune_task(
                get_task(name), cfg, seed=seed, pretrained_dir=pretrained_dir,
                data_dir=data_dir, task_dir=task_dir,
                storage_path=output_dir / RAY_STORAGE_DIR, metrics_log=ctx.metrics_log)
        results.update({f"{name}/{key}": value for key, value in metrics.items()
                        if isinstance(value, (int, float)) and not isinstance(value, bool)})
    return results


def finetune_task(spec: TaskSpec, cfg: FinetuneConfig, *, seed: int, pretrained_dir: Path,
                  data_dir: Path, task_dir: Path, storage_path: Path, metrics_log) -> dict[str, Any]:
    """Train, predict and write one task's outputs; returns what metrics.json holds."""
    from stages.training.launch import fit

    started = time.perf_counter()
    _check_seq_len(pretrained_dir, cfg.max_seq_len)
    tokenizer = load_task_tokenizer(pretrained_dir / TOKENIZER_NAME, cfg.max_seq_len)
    splits = {
        "train": read_split(spec, data_dir, "train").sample(cfg.max_train_examples, seed),
        "dev": read_split(spec, data_dir, "dev"),
        "test": read_split(spec, data_dir, "test"),
    }
    encoded = {split: encode_texts(tokenizer, ex.texts, ex.labels) for split, ex in splits.items()}
    print(f"[finetune] {spec.name}: {len(splits['train'])} train, {len(splits['dev'])} dev, "
          f"{len(splits['test'])} test examples; training on {cfg.num_workers} workers", flush=True)

    task_dir.mkdir(parents=True, exist_ok=True)
    result = fit(
        finetune_worker,
        build_loop_config(spec, cfg, seed=seed, pretrained_dir=pretrained_dir, encoded=encoded,
                          task_dir=task_dir, metrics_log=metrics_log),
        num_workers=cfg.num_workers, storage_path=storage_path, run_name=spec.name,
        max_failures=cfg.max_failures)

    with np.load(task_dir / OUTPUTS_NAME) as outputs:
        dev_predictions = predictions_from_outputs(spec, outputs["dev"])
        test_predictions = predictions_from_outputs(spec, outputs["test"])
    scores = compute_metrics(spec.metrics, dev_predictions, splits["dev"].labels)
    write_dev_predictions(task_dir / DEV_PREDICTIONS_NAME, spec, splits["dev"], dev_predictions)
    write_submission(task_dir, spec, splits["test"], test_predictions)

    metrics = {
        **scores,
        "train_examples": len(splits["train"]), "dev_examples": len(splits["dev"]),
        "test_examples": len(splits["test"]), "epochs": cfg.epochs,
        "steps": int(result.metrics.get("step", 0)) if result.metrics else 0,
        "seconds": round(time.perf_counter() - started, 2),
    }
    metrics_log.log({"task": spec.name, **{f"dev_{k}": v for k, v in scores.items()}})
    write_task_metrics(task_dir, {"task": spec.name, "primary_metric": spec.metrics[0], **metrics})
    print(f"[finetune] {spec.name}: dev {spec.metrics[0]}={scores[spec.metrics[0]]:.4f} "
          f"in {metrics['seconds']:.1f}s", flush=True)
    return metrics


def build_loop_config(spec: TaskSpec, cfg: FinetuneConfig, *, seed: int, pretrained_dir: Path,
                      encoded: dict[str, EncodedSplit], task_dir: Path, metrics_log) -> dict[str, Any]:
    """What every worker receives. The token arrays go through Ray's object store once
    (workers on any node read them zero-copy) instead of being pickled per worker."""
    import ray

    return {
        "task": spec.name, "num_labels": spec.num_labels, "seed": seed, "config": cfg,
        "head_config": {"head": "sequence_classification", "task": spec.name,
                        "num_labels": spec.num_labels, "labels": spec.labels},
        "pretrained_dir": str(pretrained_dir), "data": ray.put(encoded),
        "task_dir": str(task_dir), "metrics_log": metrics_log,
    }


def check_task_files(specs: list[TaskSpec], data_dir: Path) -> None:
    """Fail before the first task trains, not an hour later when a later task's files
    turn out to be missing (the shared data has no MNLI, QQP or QNLI train)."""
    missing = [path for spec in specs for split in spec.files
               if not (path := split_path(spec, data_dir, split)).is_file()]
    if missing:
        raise FileNotFoundError(
            f"finetune.tasks needs files that are missing: {', '.join(map(str, missing))}. Put the "
            f"GLUE download (download_glue_data.py layout) under {data_dir}/glue_data/, or remove "
            "those tasks from finetune.tasks")


def _check_seq_len(pretrained_dir: Path, max_seq_len: int) -> None:
    from stages.models.build import CONFIG_NAME

    config_path = pretrained_dir / CONFIG_NAME
    if not config_path.is_file():
        raise FileNotFoundError(
            f"{config_path} not found: finetune reads the pretrain stage's model/ directory "
            "(model.safetensors, model_config.json, tokenizer.json); re-run the pretrain stage")
    model_seq_len = json.loads(config_path.read_text())["max_seq_len"]
    if max_seq_len > model_seq_len:
        raise ValueError(
            f"finetune.max_seq_len={max_seq_len} exceeds the pretrained model's max_seq_len="
            f"{model_seq_len} ({config_path}); set finetune.max_seq_len <= {model_seq_len}")
