"""What every task family does, and the request it does it for.

A family is one way of fine-tuning a kind of task: GLUE classification and regression
on a head, SQuAD spans, CoNLL tags, or any of them as text to text on a T5. The stage's
fixed path (`stages.finetune.run`) asks the registry which family a task belongs to and
then only calls these methods:

    family = family_for(spec, source.family)          # stages.finetune.families.registry
    prepared = family.prepare(request)                     # driver: read, sample, tokenize
    model = family.worker_model(job, backbone)             # each Ray Train worker
    batch.update(family.batch_labels(labels))              # each worker, each micro batch
    metrics = family.write_outputs(request, prepared, outputs, task_dir)   # driver, after training
    print(family.summary(spec, metrics))

Adding a task kind means one new folder beside glue/ and squad/ (its spec, reader,
encoding, family and metrics), its specs in `stages.finetune.tasks` and one line in the
registry (`stages.finetune.families.registry`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from stages.finetune.model_source import build_task_model
from stages.finetune.prepared import PreparedTask
from stages.section import Section
from stages.training.model_source import ModelSource


@dataclass(frozen=True)
class TaskRequest:
    """One task to prepare and write outputs for.

    spec:      the task (`stages.finetune.tasks`: TaskSpec, SquadSpec or ConllSpec)
    cfg:       the finetune section (a `stages.finetune.config.FinetuneConfig`) with the
               task's own defaults filled in (`stages.finetune.task_defaults.config_for_task`);
               typed by its base here because the config imports the task registry, and
               so every task kind's folder, which import this module
    seed:      seeds the train/dev subsets (and the workers' shuffling and head init)
    source:    the model it starts from (`model_source.resolve_model_source`): its
               tokenizer and family ("gpt", "bert", "t5")
    data_dir:  where the task's files are (finetune.source: files)
    """

    spec: Any
    cfg: Section
    seed: int
    source: ModelSource
    data_dir: Path


class TaskFamily(ABC):
    """name:            how the registry and a FinetuneJob name the family
    spec_types:         the task kinds it fine-tunes
    model_families:     the model families it is for; None: any model that no earlier
                        family in the registry claims. A family that names model
                        families takes every task of those models, and refuses one it
                        has no format for (`unsupported`)."""

    name: ClassVar[str]
    spec_types: ClassVar[tuple[type, ...]]
    model_families: ClassVar[tuple[str, ...] | None] = None

    @abstractmethod
    def prepare(self, request: TaskRequest) -> PreparedTask:
        """The task's rows, seeded subsets of them, tokenized for the model, with scorers
        and predictors of the head outputs."""

    def build_model(self, head_config: dict[str, Any], backbone, dropout: float | None = None):
        """The task model on `backbone`, as `head_config` describes it (what the worker
        trains, exports and `saved_model.load_finetuned` rebuilds): the head named by
        head_config["head"] (`model_source.build_task_model`)."""
        return build_task_model(head_config, backbone, dropout=dropout)

    def worker_model(self, job, backbone):
        """The model a Ray Train worker trains for `job` (a FinetuneJob)."""
        return self.build_model(job.head_config, backbone, dropout=job.config.classifier_dropout)

    def batch_labels(self, labels) -> dict[str, Any]:
        """A micro batch's rows of EncodedSplit.labels as the model's keyword arguments."""
        return {"labels": labels}  # (B,) classes or scores, (B, T) tags or target ids

    def predict(self, prepared: PreparedTask, outputs: dict[str, np.ndarray]) -> dict[str, Any]:
        """Head outputs per split -> the family's predictions per split."""
        return {split: predictor(outputs[split]) for split, predictor in prepared.predictors.items()}

    @abstractmethod
    def write_outputs(self, request: TaskRequest, prepared: PreparedTask, outputs: dict[str, np.ndarray],
                      task_dir: Path) -> dict[str, Any]:
        """Write the prediction files into task_dir; return the family's part of
        metrics.json (scores with their baselines and intervals, example counts). The
        fixed path adds the run facts (epochs, steps, seconds, best_epoch)."""

    @abstractmethod
    def summary(self, spec, metrics: dict[str, Any]) -> str:
        """The scores in the stage's final line for the task ("dev accuracy=0.81 ...")."""

    def unsupported(self, spec) -> str:
        """Why this family cannot fine-tune `spec` (for families that name model families)."""
        return f"task {spec.name}: the {self.name} family has no format for it"
