"""The finetune stage: one Ray Train + DeepSpeed run per task on the pretrained model.

    metrics = run(ctx)     # {"sst2/accuracy": 0.71, "sst2/train_examples": 2000, ...}

For each task in `finetune.tasks`, with the BERT paper's lr, epochs and batch where the
config leaves them unset (`stages.finetune.task_defaults`): read the task's files (or its
Hugging Face Hub copy, `finetune.source: hub`, `stages.finetune.hub`), tokenize them with the
model's tokenizer, fine-tune the task's head (`model_source.build_task_model`: GPT or
BERT from `finetune.init_from`) on the workers (`stages.finetune.worker`), then score
the dev set and write predictions (see `stages.finetune.outputs` for the files). GLUE
tasks in `stages.finetune.glue_task`, SQuAD in `squad.task`, CoNLL in `conll.task`.

Tasks are independent runs: several train at the same time when the cluster has the
CPUs (and GPUs) for them (`finetune.max_parallel_tasks`). Each has its own fingerprint
(`stages.finetune.task_cache`): a task whose `metrics.json` exists is done and skipped,
and a task finished with the same fingerprint in another directory of this stage (say
before `tasks` gained another entry) is copied, not trained again. A task cut off
mid-training resumes from its last epoch checkpoint under `<output_dir>/ray/<task>`.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from stages.finetune.config import FinetuneConfig
from stages.finetune.inputs import INIT_FROM, task_input_files
from stages.finetune.model_source import check_seq_len, resolve_model_source
from stages.finetune.outputs import is_task_finished, read_task_metrics
from stages.finetune.prepared import PreparedTask
from stages.finetune.task_cache import reuse_finished_task, task_fingerprint, write_task_fingerprint
from stages.finetune.task_defaults import config_for_task
from stages.finetune.tasks import ConllSpec, SquadSpec, get_task

RAY_STORAGE_DIR = "ray"  # the engine keeps it out of the manifest (scratch_dirs)


def run(ctx) -> dict[str, Any]:
    cfg: FinetuneConfig = ctx.config
    seed = cfg.seed if cfg.seed is not None else ctx.experiment.seed
    # Absolute paths: Ray Train workers run in their own working directories.
    source = resolve_model_source(cfg.init_from, Path(ctx.inputs["pretrain"]).resolve() / "model")
    check_seq_len(source, cfg.max_seq_len)
    if source["family"] == "t5":  # text to text: a task without a format is refused before any training
        from stages.finetune.text_to_text import check_supported

        for name in cfg.tasks:
            check_supported(get_task(name))
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

    # Each task's rank 0 opens its own wandb run (stages.finetune.task_tracking).
    tracking = {"experiment": ctx.experiment, "fingerprint": ctx.fingerprint}

    def train(name: str) -> None:
        write_task_fingerprint(output_dir / name, to_train[name])
        _runner(get_task(name))(
            get_task(name), config_for_task(cfg, name), seed=seed, source=source, data_dir=data_dir,
            task_dir=output_dir / name,
            storage_path=output_dir / RAY_STORAGE_DIR, metrics_log=ctx.metrics_log,
            tracking={**tracking, "task_fingerprint": to_train[name]})

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


def _runner(spec):
    if isinstance(spec, SquadSpec):
        from stages.finetune.squad.task import finetune_squad

        return finetune_squad
    if isinstance(spec, ConllSpec):
        from stages.finetune.conll.task import finetune_conll

        return finetune_conll
    from stages.finetune.glue_task import finetune_glue

    return finetune_glue


def build_loop_config(spec, cfg: FinetuneConfig, *, seed: int, source: dict[str, Any],
                      prepared: PreparedTask, task_dir: Path, metrics_log,
                      tracking: dict[str, Any] | None = None) -> dict[str, Any]:
    """What every worker receives. The token arrays go through Ray's object store once
    (workers on any node read them zero-copy) instead of being pickled per worker.
    The prepared task's scorers are logged per evaluation by rank 0; tracking:
    {"experiment", "fingerprint"} for the task's wandb run."""
    import ray

    return {
        "task": spec.name, "seed": seed, "config": cfg,
        "head_config": {"head": spec.head, "task": spec.name,
                        "num_labels": getattr(spec, "num_labels", 2), "labels": getattr(spec, "labels", None)},
        "source": source, "data": ray.put(prepared.encoded), "predict_splits": prepared.predict_splits,
        "task_dir": str(task_dir), "metrics_log": metrics_log,
        "scorers": prepared.scorers, "tracking": tracking, "primary_metric": spec.metrics[0],
    }


def train_prepared_task(spec, cfg: FinetuneConfig, *, seed: int, source: dict[str, Any],
                        prepared: PreparedTask, task_dir: Path, storage_path: Path, metrics_log,
                        tracking: dict[str, Any] | None = None):
    """One task's Ray Train run (every task family trains the same way; only preparing
    and scoring differ). Returns the ray.train.Result; the workers leave their dev/test
    outputs in task_dir."""
    from stages.finetune.worker import finetune_worker
    from stages.training.launch import fit

    task_dir.mkdir(parents=True, exist_ok=True)
    return fit(finetune_worker,
               build_loop_config(spec, cfg, seed=seed, source=source, prepared=prepared,
                                 task_dir=task_dir, metrics_log=metrics_log, tracking=tracking),
               num_workers=cfg.num_workers, storage_path=storage_path, run_name=spec.name,
               max_failures=cfg.max_failures, use_gpu=cfg.gpus_per_worker > 0)


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
