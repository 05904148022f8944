"""The finetune stage: one Ray Train + DeepSpeed run per task on the pretrained model.

    metrics = run(ctx)     # {"sst2/accuracy": 0.71, "sst2/train_examples": 2000, ...}

For each task in `finetune.tasks`, in order: read the task's files, tokenize them with
the model's tokenizer, fine-tune the task's head (`model_source.build_task_model`: GPT
or BERT from `finetune.init_from`) on the workers
(`stages.finetune.worker`), then score the full dev set and write predictions (see
`stages.finetune.outputs` for the files). A task whose `metrics.json` exists is done and
is skipped, so a re-run after an interruption continues with the next task; a task cut
off mid-training resumes from its last epoch checkpoint under `<output_dir>/ray/<task>`.
GLUE tasks run here; SQuAD in `stages.finetune.squad.task`, CoNLL in `stages.finetune.conll.task`.
"""

from __future__ import annotations

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
from stages.finetune.model_source import check_seq_len, resolve_model_source
from stages.finetune.tasks import ConllSpec, SquadSpec, TaskSpec, get_task
from stages.finetune.tasks.tsv import read_split
from stages.finetune.worker import OUTPUTS_NAME, finetune_worker

RAY_STORAGE_DIR = "ray"  # the engine keeps it out of the manifest (scratch_dirs)


def run(ctx) -> dict[str, Any]:
    cfg: FinetuneConfig = ctx.config
    seed = cfg.seed if cfg.seed is not None else ctx.experiment.seed
    # Absolute paths: Ray Train workers run in their own working directories.
    source = resolve_model_source(cfg.init_from, Path(ctx.inputs["pretrain"]).resolve() / "model")
    check_seq_len(source, cfg.max_seq_len)
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
            metrics = _runner(get_task(name))(
                get_task(name), cfg, seed=seed, source=source,
                data_dir=data_dir, task_dir=task_dir,
                storage_path=output_dir / RAY_STORAGE_DIR, metrics_log=ctx.metrics_log)
        results.update({f"{name}/{key}": value for key, value in metrics.items()
                        if isinstance(value, (int, float)) and not isinstance(value, bool)})
    return results


def _runner(spec):
    if isinstance(spec, SquadSpec):
        from stages.finetune.squad.task import finetune_squad

        return finetune_squad
    if isinstance(spec, ConllSpec):
        from stages.finetune.conll.task import finetune_conll

        return finetune_conll
    return finetune_task


def finetune_task(spec: TaskSpec, cfg: FinetuneConfig, *, seed: int, source: dict[str, Any],
                  data_dir: Path, task_dir: Path, storage_path: Path, metrics_log) -> dict[str, Any]:
    """Train, predict and write one GLUE task's outputs; returns what metrics.json holds."""
    from stages.training.launch import fit

    started = time.perf_counter()
    tokenizer = load_task_tokenizer(source["tokenizer"], cfg.max_seq_len)
    splits = {
        "train": read_split(spec, data_dir, "train").sample(cfg.max_train_examples, seed),
        "dev": read_split(spec, data_dir, "dev").sample(cfg.max_eval_examples, seed),
        "test": read_split(spec, data_dir, "test"),
    }
    encoded = {split: encode_texts(tokenizer, ex.texts, ex.labels) for split, ex in splits.items()}
    print(f"[finetune] {spec.name}: {len(splits['train'])} train, {len(splits['dev'])} dev, "
          f"{len(splits['test'])} test examples; training on {cfg.num_workers} workers", flush=True)

    task_dir.mkdir(parents=True, exist_ok=True)
    result = fit(
        finetune_worker,
        build_loop_config(spec, cfg, seed=seed, source=source, encoded=encoded,
                          task_dir=task_dir, metrics_log=metrics_log),
        num_workers=cfg.num_workers, storage_path=storage_path, run_name=spec.name,
        max_failures=cfg.max_failures, use_gpu=cfg.gpus_per_worker > 0)

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


def build_loop_config(spec, cfg: FinetuneConfig, *, seed: int, source: dict[str, Any],
                      encoded: dict[str, EncodedSplit], task_dir: Path, metrics_log,
                      predict_splits: tuple[str, ...] = ("dev", "test")) -> dict[str, Any]:
    """What every worker receives. The token arrays go through Ray's object store once
    (workers on any node read them zero-copy) instead of being pickled per worker."""
    import ray

    return {
        "task": spec.name, "seed": seed, "config": cfg,
        "head_config": {"head": spec.head, "task": spec.name,
                        "num_labels": getattr(spec, "num_labels", 2), "labels": getattr(spec, "labels", None)},
        "source": source, "data": ray.put(encoded), "predict_splits": predict_splits,
        "task_dir": str(task_dir), "metrics_log": metrics_log,
    }


def check_task_files(specs: list, data_dir: Path) -> None:
    """Fail before the first task trains, not an hour later when a later task's files
    turn out to be missing (the shared data has no MNLI, QQP or QNLI train)."""
    missing = [path for spec in specs for path in spec.required_paths(data_dir) if not path.is_file()]
    if missing:
        raise FileNotFoundError(
            f"finetune.tasks needs files that are missing: {', '.join(map(str, missing))}. Put the "
            f"GLUE download (download_glue_data.py layout) under {data_dir}/glue_data/, SQuAD JSON under "
            f"{data_dir}/squad/, CoNLL-2003 under {data_dir}/conll2003/, or remove those tasks from "
            "finetune.tasks")
