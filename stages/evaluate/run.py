"""The evaluate stage: zero- and few-shot scores of the pretrained model, as in the GPT-2
(zero-shot LM: LAMBADA, WikiText-2, PTB) and GPT-3 (k-shot PIQA, ARC, COPA, BoolQ, ...)
papers, in agreement with lm-evaluation-harness.

    metrics = run(ctx)   # {"piqa/acc": 0.61, "piqa/acc_baseline": 0.5, "piqa/acc_ci95_low": ...}

Every task (`evaluate.tasks`, specs in stages/evaluate/tasks/) is planned in the driver
(rows, the seeded subset, each row's demonstrations); `evaluate.num_workers` Ray tasks
each load the model once and answer a contiguous slice of every task's requests; the
driver merges the answers in example order and scores them. Workers rebuild the same
plans from the same files and seed, so only small jobs travel, and the numbers do not
depend on how many workers there were.

Writes results.json (every task: scores with baseline and 95% interval, shots, seed,
truncated prompts), examples/<task>.jsonl (one record per evaluated row) and
metrics.jsonl (one record per task).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stages.evaluate.config import EvaluateConfig
from stages.evaluate.evaluate_task import TaskPlan, TaskReport, merge_answered, plan_task, run_requests, score_task
from stages.evaluate.generation_task import write_generation_texts
from stages.evaluate.spec import TaskSpec, resolve_task_spec
from stages.ray_tasks import map_where_files_are, map_tasks


@dataclass(frozen=True)
class TaskSetting:
    task: str          # as written in evaluate.tasks (a name or a spec path)
    shots: int


@dataclass(frozen=True)
class WorkerJob:
    model_dir: str
    data_dir: str
    settings: tuple[TaskSetting, ...]
    seed: int
    max_examples: int | None
    batch_size: int
    max_length: int | None
    rank: int
    world_size: int
    cpus: int
    device: str


def run(ctx) -> dict[str, Any]:
    cfg: EvaluateConfig = ctx.config
    if not cfg.tasks:
        return {"tasks": 0}
    model_dir = Path(ctx.inputs["pretrain"]).resolve() / "model"
    data_dir = Path(ctx.experiment.resolved_data_dir)
    specs = {task: resolve_task_spec(task) for task in cfg.tasks}
    family = json.loads((model_dir / "model_config.json").read_text()).get("family", "gpt")
    _check_family_supports(family, specs, source=model_dir / "model_config.json")
    settings = tuple(TaskSetting(task, 0 if spec.kind == "perplexity" else cfg.shots_for(task, spec.name))
                     for task, spec in specs.items())
    plans = {s.task: make_plan(specs[s.task], data_dir, s.shots, cfg.seed, cfg.max_examples)
             for s in settings}
    jobs = [WorkerJob(model_dir=str(model_dir), data_dir=str(data_dir), settings=settings, seed=cfg.seed,
                      max_examples=cfg.max_examples, batch_size=cfg.batch_size, max_length=cfg.max_length,
                      rank=rank, world_size=cfg.num_workers, cpus=cfg.cpus_per_worker,
                      device="cuda" if cfg.gpus_per_worker else "cpu")
            for rank in range(cfg.num_workers)]
    started = time.perf_counter()
    parts = map_tasks(answer_share, jobs, desc="[evaluate] workers", num_cpus=cfg.cpus_per_worker,
                      num_gpus=cfg.gpus_per_worker, transfer=ctx.node_transfer)
    reports = [score_task(plans[s.task], merge_answered([part[s.task] for part in parts])) for s in settings]
    write_outputs(ctx.output_dir, reports, ctx.metrics_log)
    print(summary_table(reports), flush=True)
    metrics: dict[str, Any] = {"tasks": len(reports), "seconds_scoring": time.perf_counter() - started}
    if cfg.snapshots:
        metrics["snapshots_scored"] = score_training_snapshots(ctx, specs, settings, data_dir,
                                                               scored_model=(model_dir, reports))
    for report in reports:
        metrics.update({f"{report.task}/{key}": value for key, value in report.metrics().items()})
    return metrics


def score_training_snapshots(ctx, specs: dict[str, TaskSpec], settings, data_dir: Path,
                             scored_model=None) -> int:
    """Score the pretrain stage's snapshots (where their weights are) into snapshots.json; the
    report plots them against training tokens. Returns how many snapshots were scored."""
    cfg: EvaluateConfig = ctx.config
    arguments = dict(pretrain_dir=Path(ctx.inputs["pretrain"]).resolve(),
                     specs_and_shots=[(specs[s.task], s.shots) for s in settings], data_dir=data_dir, seed=cfg.seed,
                     max_examples=cfg.max_examples, batch_size=cfg.batch_size,
                     max_length=cfg.max_length,
                     device="cuda" if cfg.gpus_per_worker else "cpu", scored_model=scored_model,
                     recorded_digests=_recorded_digests(ctx.input_manifests.get("pretrain")))
    # Where the snapshots' weights are: a task on a node that fetches them in an
    # object-store run, this process otherwise (stages.ray_tasks.map_where_files_are).
    [rows] = map_where_files_are(_score_snapshots_job, [arguments], desc="evaluate: snapshots",
                                 num_cpus=cfg.cpus_per_worker, transfer=ctx.node_transfer)
    (Path(ctx.output_dir) / "snapshots.json").write_text(json.dumps(rows, indent=2, default=float) + "\n",
                                                         encoding="utf-8")
    return len({row["step"] for row in rows})


def _score_snapshots_job(arguments: dict) -> list[dict]:
    """score_snapshots's keyword arguments in, its rows out (a module-level task body)."""
    from stages.evaluate.snapshots import score_snapshots

    return score_snapshots(**arguments)


def _recorded_digests(manifest: dict | None) -> dict[str, str]:
    """sha256 by file path from a stage manifest: what the weights comparison reads
    instead of hashing the model files again."""
    return {entry["path"]: entry["sha256"] for entry in (manifest or {}).get("files", [])
            if isinstance(entry, dict) and entry.get("path") and entry.get("sha256")}


def make_plan(spec: TaskSpec, data_dir: Path, shots: int, seed: int, max_examples: int | None) -> TaskPlan:
    return plan_task(spec, data_dir, shots=shots, seed=seed, max_examples=max_examples)


def answer_share(job: WorkerJob) -> dict[str, list]:
    """On a worker: load the model once, answer this worker's slice of every task."""
    import torch

    from stages.evaluate.scorers import load_scorer

    torch.set_num_threads(job.cpus)
    scorer = load_scorer(job.model_dir, batch_size=job.batch_size, device=job.device,
                         max_length=job.max_length)
    answered = {}
    for setting in job.settings:
        spec = resolve_task_spec(setting.task)
        plan = make_plan(spec, Path(job.data_dir), setting.shots, job.seed, job.max_examples)
        answered[setting.task] = run_requests(scorer, spec, plan.requests(plan.shard(job.rank, job.world_size)))
    return answered


# The families stages.evaluate.scorers.load_scorer has a scorer for (named here to check them
# in the driver, which does not import torch). Every variant of each is scored: ALBERT by its
# own MLM head, ELECTRA by its generator, the original Transformer as T5 (scorers/*.py).
SCORED_FAMILIES = ("gpt", "bert", "t5")


def _check_family_supports(family: str, specs: dict[str, TaskSpec], source: str | Path = "model_config.json"
                           ) -> None:
    """Refuse, before any Ray task starts, a model no scorer reads and tasks its scorer cannot answer."""
    if family not in SCORED_FAMILIES:
        raise ValueError(f"{source}: no scorer for model family {family!r}; the evaluate stage scores "
                         f"{', '.join(SCORED_FAMILIES)} models: leave evaluate.tasks empty for this model")
    if family == "bert":
        generation = [task for task, spec in specs.items() if spec.kind == "generation"]
        if generation:
            raise ValueError(
                f"evaluate.tasks: {', '.join(generation)} generate text, which a BERT model cannot do; "
                "remove them for this model (they run for gpt and t5)")


def write_outputs(output_dir: Path, reports: list[TaskReport], metrics_log) -> None:
    output_dir = Path(output_dir)
    (output_dir / "examples").mkdir(parents=True, exist_ok=True)
    for report in reports:
        with open(output_dir / "examples" / f"{report.task}.jsonl", "w", encoding="utf-8") as f:
            f.writelines(json.dumps(record, default=float) + "\n" for record in report.examples)
        metrics_log.log({"task": report.task, "shots": report.shots, **report.metrics()})
        write_generation_texts(output_dir, report)  # texts/<task>/hyp.txt, ref.txt: what BLEU/ROUGE scored
    results = {report.task: report.to_dict() for report in reports}
    (output_dir / "results.json").write_text(json.dumps(results, indent=2, default=float) + "\n",
                                             encoding="utf-8")


def clears_baseline(score) -> bool:
    """Whether the whole 95% interval is on the better side of the baseline (True when
    there is no baseline or no interval to judge by)."""
    if score.baseline is None or score.ci95 is None:
        return True
    low, high = score.ci95
    return low > score.baseline if score.higher_is_better else high < score.baseline


def summary_table(reports: list[TaskReport]) -> str:
    """One line per score: value, 95% interval, baseline, and whether the interval clears it."""
    lines = ["[evaluate] task            shots  metric            score   95% interval        baseline"]
    for report in reports:
        for name, score in report.scores.items():
            interval = f"[{score.ci95[0]:.4g}, {score.ci95[1]:.4g}]" if score.ci95 else "-"
            baseline = "-" if score.baseline is None else f"{score.baseline:.4g}"
            flag = "  (not better than baseline)" if not clears_baseline(score) else ""
            lines.append(f"[evaluate] {report.task:<15} {report.shots:>5}  {name:<16} {score.value:>7.4g}  "
                         f"{interval:<18} {baseline:>8}{flag}")
        if report.num_truncated:
            lines.append(f"[evaluate] {report.task}: {report.num_truncated} of {report.num_examples} prompts "
                         "were cut from the left to fit the context")
        if report.num_skipped:
            lines.append(f"[evaluate] {report.task}: {report.num_skipped} of "
                         f"{report.num_examples + report.num_skipped} examples not scored: a choice is "
                         "longer than the model's context (the scores are over the rest)")
    return "\n".join(lines)
