"""The finetune stage: one Ray Train + DeepSpeed run per task on the pretrained model.

    metrics = run(ctx)     # {"sst2/accuracy": 0.71, "sst2/train_examples": 2000, ...}

For each task in `finetune.tasks`, with the BERT paper's lr, epochs and batch where the
config leaves them unset (`stages.finetune.task_defaults`), one fixed path
(`train_task`):

    family_for(spec, model family)     which task family fine-tunes it (`families.registry`)
    family.prepare(request)            read the task's files (or its Hugging Face Hub copy,
                                       `finetune.source: hub`), sample, tokenize
    fit(finetune_worker, job)          train on the Ray Train workers (`stages.finetune.worker`,
                                       given a `job.FinetuneJob`); rank 0 leaves the raw
                                       head outputs of the predicted splits
    family.write_outputs(...)          prediction files and the family's scores
    export_task_hf(...)                <task>/hf/: the model as its transformers class
                                       (`stages.finetune.hf_export`)
    metrics.json                       plus the run facts (epochs, steps, seconds, best epoch)

The families (`stages.finetune.families`): GLUE classification / regression, SQuAD spans
and CoNLL tags on a GPT or BERT head, and text to text for a T5 on any of them. This
module names none of them: a new task kind is a new family file and a line in the
registry. A task no family can fine-tune (a T5 on a task it has no format for) is
refused before any task trains.

Tasks are independent runs: several train at the same time when the cluster has the
CPUs (and GPUs) for them (`finetune.max_parallel_tasks`). Each has its own fingerprint
(`stages.finetune.task_cache`): a task whose `metrics.json` exists is done and skipped,
and a task finished with the same fingerprint in another directory of this stage (say
before `tasks` gained another entry) is copied, not trained again. A task cut off
mid-training resumes from its last epoch checkpoint under `<output_dir>/ray/<task>`.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from stages.finetune.best_checkpoint import best_epoch_facts
from stages.finetune.config import FinetuneConfig
from stages.finetune.families.registry import family_for
from stages.finetune.hf_export import export_task_hf
from stages.finetune.inputs import INIT_FROM, task_input_files
from stages.finetune.job import build_finetune_job
from stages.finetune.model_source import check_seq_len, resolve_model_source
from stages.finetune.outputs import OUTPUTS_NAME, is_task_finished, read_task_metrics, write_task_metrics
from stages.finetune.task_cache import reuse_finished_task, task_fingerprint, write_task_fingerprint
from stages.finetune.task_defaults import config_for_task
from stages.finetune.task_family import TaskRequest
from stages.finetune.tasks import get_task
from stages.ray_tasks import map_where_files_are

RAY_STORAGE_DIR = "ray"  # the engine keeps it out of the manifest (scratch_dirs)


def run(ctx) -> dict[str, Any]:
    cfg: FinetuneConfig = ctx.config
    seed = cfg.seed if cfg.seed is not None else ctx.experiment.seed
    # Absolute paths: Ray Train workers run in their own working directories.
    source = resolve_model_source(cfg.init_from, Path(ctx.inputs["pretrain"]).resolve() / "model")
    check_seq_len(source, cfg.max_seq_len)
    for name in cfg.tasks:  # a task no family fine-tunes on this model is refused before any training
        family_for(get_task(name), source.family)
    output_dir = Path(ctx.output_dir).resolve()
    data_dir = ctx.experiment.resolved_data_dir
    to_train: dict[str, str] = {}  # task -> its fingerprint
    for name in cfg.tasks:
        # The task's own settings (BERT-paper defaults where the config leaves them unset).
        task_cfg = config_for_task(cfg, name)
        task_dir = output_dir / name
        fingerprint = task_fingerprint(name, task_cfg, seed=seed, source=source,
                                       data=_task_digests(ctx.input_digests, name, cfg, data_dir))
        if is_task_finished(task_dir):
            print(f"[finetune] {name}: already finished ({task_dir / 'metrics.json'}), skipped", flush=True)
        elif (origin := reuse_finished_task(task_dir, fingerprint, ctx.metrics_log)) is not None:
            print(f"[finetune] {name}: finished with the same task fingerprint {fingerprint} in {origin}, "
                  "copied instead of trained", flush=True)
        else:
            to_train[name] = fingerprint
    if cfg.source == "files":
        check_task_files([get_task(name) for name in to_train], data_dir)

    # Ray Train's checkpoints: in the bucket for an object-store workdir (they outlive this
    # machine), else beside the tasks.
    output_url = getattr(ctx, "output_url", None)
    ray_storage_path = f"{output_url}/{RAY_STORAGE_DIR}" if output_url else output_dir / RAY_STORAGE_DIR
    # Each task's rank 0 opens its own wandb run (stages.finetune.task_tracking).
    tracking = {"experiment": ctx.experiment, "fingerprint": ctx.fingerprint}

    def train(name: str) -> None:
        write_task_fingerprint(output_dir / name, to_train[name])
        request = TaskRequest(spec=get_task(name), cfg=config_for_task(cfg, name), seed=seed, source=source,
                              data_dir=Path(data_dir))
        train_task(request, task_dir=output_dir / name, storage_path=ray_storage_path,
                   metrics_log=ctx.metrics_log, tracking={**tracking, "task_fingerprint": to_train[name]},
                   transfer=ctx.node_transfer)

    slots = parallel_task_slots(cfg, len(to_train), _cluster_resources() if len(to_train) > 1 else {})
    run_concurrently(train, list(to_train), slots=slots)
    results: dict[str, Any] = {}
    for name in cfg.tasks:
        results.update({f"{name}/{key}": value for key, value in read_task_metrics(output_dir / name).items()
                        if isinstance(value, (int, float)) and not isinstance(value, bool)})
    return results


def _task_digests(digests: dict[str, str], name: str, cfg: FinetuneConfig, data_dir: Path) -> dict[str, str]:
    """The digests of the files this task reads, and of the init_from folder: editing
    SST-2's dev.tsv changes SST-2's fingerprint and no other task's."""
    own = set(task_input_files(name, data_dir)) if cfg.source == "files" else set()
    return {key: value for key, value in digests.items() if key in own or key.startswith(INIT_FROM)}


def parallel_task_slots(cfg: FinetuneConfig, num_tasks: int, resources: dict[str, float]) -> int:
    """How many tasks train at once: finetune.max_parallel_tasks, else as many as the
    Ray cluster's `resources` (CPUs, GPUs) hold at one task's worker group each."""
    if num_tasks <= 1:
        return 1
    if cfg.max_parallel_tasks is not None:
        return min(cfg.max_parallel_tasks, num_tasks)
    fits = int(resources.get("CPU", 0) // cfg.num_workers)
    if cfg.gpus_per_worker:
        fits = min(fits, int(resources.get("GPU", 0) // (cfg.num_workers * cfg.gpus_per_worker)))
    return max(1, min(fits, num_tasks))


def _cluster_resources() -> dict[str, float]:
    import ray

    # Without a Ray instance, fit() starts a local one of its own: one task at a time.
    return ray.cluster_resources() if ray.is_initialized() else {}


def run_concurrently(train, names: list[str], slots: int) -> None:
    """`train(name)` for every task, `slots` at a time. One slot: in order, in this
    thread (Ctrl-C aborts the Ray Train run cleanly). Several: in threads (each task's
    Ray Train run has its own controller and workers); a failed task does not stop the
    others, which finish and are kept; then the first failure is raised."""
    if slots <= 1:
        for name in names:
            train(name)
        return
    print(f"[finetune] training {len(names)} tasks, {slots} at a time: {', '.join(names)}", flush=True)
    with ThreadPoolExecutor(max_workers=slots, thread_name_prefix="finetune") as pool:
        futures = {name: pool.submit(train, name) for name in names}
    failed = [(name, future.exception()) for name, future in futures.items() if future.exception()]
    if failed:
        name, error = failed[0]
        others = f" (also failed: {', '.join(n for n, _ in failed[1:])})" if len(failed) > 1 else ""
        raise RuntimeError(f"finetune task {name} failed: {type(error).__name__}: {error}{others}") from error


def train_task(request: TaskRequest, *, task_dir: Path, storage_path: Path | str, metrics_log,
               tracking: dict[str, Any] | None = None, transfer=None) -> dict[str, Any]:
    """Prepare, train, predict and write one task (the fixed path of the module
    docstring); returns what its metrics.json holds. `transfer`: the stage's
    StageContext.node_transfer."""
    from stages.finetune.worker import finetune_worker
    from stages.training.launch import fit

    spec, cfg = request.spec, request.cfg
    started = time.perf_counter()
    family = family_for(spec, request.source.family)
    prepared = family.prepare(request)
    print(f"[finetune] {spec.name}: {prepared.description}", flush=True)

    task_dir.mkdir(parents=True, exist_ok=True)
    job = build_finetune_job(request, family, prepared, task_dir=task_dir, metrics_log=metrics_log,
                             tracking=tracking)
    # Ray Train passes train_loop_config to every worker as a dict: the job is its one entry.
    result = fit(finetune_worker, {"job": job}, num_workers=cfg.num_workers, storage_path=storage_path,
                 run_name=spec.name, max_failures=cfg.max_failures, use_gpu=cfg.gpus_per_worker > 0,
                 transfer=transfer)

    # Reads the task's outputs and weights: where they are (stages.ray_tasks.map_where_files_are).
    [written] = map_where_files_are(finish_task, [FinishedTask(request, family, prepared, task_dir)],
                                    desc=f"finetune: {spec.name} outputs", transfer=transfer)
    metrics = {
        **written,
        "steps": int(result.metrics.get("step", 0)) if result.metrics else 0,
        "seconds": round(time.perf_counter() - started, 2),
    }
    write_task_metrics(task_dir, {"task": spec.name, "primary_metric": spec.metrics[0], **metrics})
    print(f"[finetune] {spec.name}: {family.summary(spec, metrics)} in {metrics['seconds']:.1f}s", flush=True)
    for warning in metrics.get("warnings", []):
        print(f"[finetune] WARNING {spec.name}: {warning}", flush=True)
    return metrics


@dataclass(frozen=True)
class FinishedTask:
    request: TaskRequest
    family: Any
    prepared: Any
    task_dir: Path


def finish_task(job: FinishedTask) -> dict[str, Any]:
    """The trained task's predictions and scores, its transformers folder and its best
    epoch, from what the workers wrote in its folder."""
    spec, cfg = job.request.spec, job.request.cfg
    with np.load(job.task_dir / OUTPUTS_NAME) as saved:
        outputs = {split: saved[split] for split in job.prepared.predict_splits}
    return {
        **job.family.write_outputs(job.request, job.prepared, outputs, job.task_dir),
        **export_task_hf(job.task_dir, spec, cfg),  # <task>/hf/: the model as its transformers class
        "epochs": cfg.epochs, **best_epoch_facts(job.task_dir, cfg.keep_best),
    }


def check_task_files(specs: list, data_dir: Path) -> None:
    """Fail before the first task trains, not an hour later when a later task's files
    turn out to be missing (the shared data has no MNLI, QQP or QNLI train)."""
    missing = [path for spec in specs for path in spec.required_paths(data_dir) if not path.is_file()]
    if missing:
        raise FileNotFoundError(
            f"finetune.tasks needs files that are missing: {', '.join(map(str, missing))}. Put the "
            f"GLUE download (download_glue_data.py layout) under {data_dir}/glue_data/, SQuAD JSON under "
            f"{data_dir}/squad/, CoNLL-2003 under {data_dir}/conll2003/, a translation or summarization task's "
            "files where its spec's splits name them (relative to data_dir), or remove those tasks from "
            "finetune.tasks")
