"""What the driver sends to every Ray Train worker of one task: a FinetuneJob.

    job = build_finetune_job(request, family, prepared, task_dir=..., metrics_log=..., tracking=...)
    fit(finetune_worker, {"job": job}, ...)      # stages.finetune.run

Built and checked in the driver, so that a mistake fails there, before any worker
starts; frozen, so that no worker can change what the others see.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stages.finetune.config import FinetuneConfig
from stages.finetune.families.registry import FAMILY_NAMES
from stages.finetune.prepared import PreparedTask, Scorer
from stages.finetune.task_family import TaskFamily, TaskRequest
from stages.training.model_source import ModelSource


@dataclass(frozen=True)
class FinetuneJob:
    """task:            the task name ("sst2")
    family:             the task family's registry name (`families.registry.family_named`):
                        it builds the model and lays out each batch's labels
    seed:               seeds the head init, the per-rank dropout masks and the shuffling
    config:             the finetune section, with the task's own defaults filled in
    head_config:        head kind, task, num_labels, labels (`TaskFamily.build_model`;
                        `saved_model.save_finetuned` records it as head_config.json)
    source:             where the backbone comes from (`model_source.resolve_model_source`)
    data:               ObjectRef of {"train": EncodedSplit, "dev": ..., "test": ...}: the
                        token arrays go through Ray's object store once (workers on any
                        node read them zero-copy) instead of being pickled per worker
    predict_splits:     the splits predicted after training ("dev" among them)
    task_dir:           absolute: where rank 0 writes model_outputs.npz and model/
    metrics_log:        object with .log(dict), .read() and .path (the stage's
                        metrics.jsonl), used by rank 0
    scorers:            split -> callable(head outputs (N, k)) -> {metric: score}, the same
                        functions the driver scores with; rank 0 logs "dev_<metric>" (and
                        "test_<metric>" where the test split has labels)
    tracking:           {"experiment", "fingerprint", "task_fingerprint"} for the task's
                        wandb run (None: metrics.jsonl only)
    primary_metric:     the task's main metric; with finetune.keep_best the epoch with the
                        best dev score on it gives the weights that predict dev and test and
                        are saved (`stages.finetune.best_checkpoint`)
    """

    task: str
    family: str
    seed: int
    config: FinetuneConfig
    head_config: dict[str, Any]
    source: ModelSource
    data: Any
    predict_splits: tuple[str, ...]
    task_dir: str
    metrics_log: Any
    scorers: dict[str, Scorer]
    tracking: dict[str, Any] | None
    primary_metric: str

    def __post_init__(self) -> None:
        if self.family not in FAMILY_NAMES:
            raise ValueError(f"task {self.task}: unknown task family {self.family!r}; known: "
                             f"{', '.join(FAMILY_NAMES)} (stages/finetune/families/registry.py)")
        if "dev" not in self.predict_splits:
            raise ValueError(f"task {self.task}: predict_splits {self.predict_splits} must include 'dev': "
                             "the workers score it after every epoch")
        unpredicted = sorted(set(self.scorers) - set(self.predict_splits))
        if unpredicted:
            raise ValueError(f"task {self.task}: scorers for {unpredicted}, which are not in predict_splits "
                             f"{self.predict_splits}")
        if not Path(self.task_dir).is_absolute():
            raise ValueError(f"task {self.task}: task_dir {self.task_dir} must be absolute: Ray Train workers "
                             "run in their own working directories")


def build_finetune_job(request: TaskRequest, family: TaskFamily, prepared: PreparedTask, *, task_dir: Path,
                       metrics_log, tracking: dict[str, Any] | None = None) -> FinetuneJob:
    """The job for `request`'s task, its token arrays put into Ray's object store."""
    import ray

    spec = request.spec
    return FinetuneJob(
        task=spec.name, family=family.name, seed=request.seed, config=request.cfg,
        head_config={"head": spec.head, "task": spec.name,
                     "num_labels": getattr(spec, "num_labels", 2), "labels": getattr(spec, "labels", None)},
        source=request.source, data=ray.put(prepared.encoded), predict_splits=prepared.predict_splits,
        task_dir=str(task_dir), metrics_log=metrics_log, scorers=prepared.scorers, tracking=tracking,
        primary_metric=spec.metrics[0])
