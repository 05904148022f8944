"""Every pretraining objective, and the only place that picks one by name.

    objective = objective_named("mlm")                          # the dataset stage, from its config
    loss = build_objective(index, family="bert", index_path=...)   # the trainer, from index.json
    out = loss(engine, batch, label_smoothing=0.1)              # ObjectiveOutput
    loader = ExampleLoader(dataset_dir, "train", 16, batch_builder=build_batch_builder)

    clm   (gpt)   CausalLM          part clm
    mlm   (bert)  MaskedLM          parts mlm + nsp | sop | (none), + sbo (span_boundary)
    span  (t5)    SpanCorruption    part span
    mlm   (bert variant electra)  ReplacedTokenDetection  parts mlm (generator) + rtd

The dataset's index.json names the objective (and, for mlm, the sentence task); the
model family must be the one that objective trains. ELECTRA (`variant` electra) trains
on the mlm dataset without a sentence task.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from stages.objectives.base import PretrainingObjective
from stages.objectives.clm import ClmObjective
from stages.objectives.mlm import MlmObjective
from stages.objectives.span import SpanObjective

if TYPE_CHECKING:  # the loader imports torch
    from stages.data.loader import BatchBuilder

OBJECTIVES: tuple[PretrainingObjective, ...] = (ClmObjective(), MlmObjective(), SpanObjective())
OBJECTIVE_NAMES: tuple[str, ...] = tuple(objective.name for objective in OBJECTIVES)
FAMILY_OF_OBJECTIVE = {objective.name: objective.model_family for objective in OBJECTIVES}


def objective_named(name: str, index_path: str | Path = "index.json") -> PretrainingObjective:
    for objective in OBJECTIVES:
        if objective.name == name:
            return objective
    raise ValueError(f"{index_path}: unknown objective {name!r}; the dataset stage writes "
                     f"one of {sorted(OBJECTIVE_NAMES)}: rebuild the dataset")


def _index_objective(index: dict[str, Any], index_path: str | Path = "index.json") -> PretrainingObjective:
    return objective_named(index.get("objective", "clm"), index_path)  # clm's index once had no key


def build_objective(index: dict[str, Any], family: str, index_path: str | Path = "index.json",
                    span_boundary: bool = False, variant: str | None = None):
    """The loss the dataset `index` was built for, checked against the model family.
    span_boundary: the model has SpanBERT's SBO head (BertConfig.span_boundary_objective).
    variant: the model config's; electra trains replaced-token detection on the mlm dataset."""
    objective = _index_objective(index, index_path)
    if family != objective.model_family:
        expected_objective = {f: o for o, f in FAMILY_OF_OBJECTIVE.items()}[family]
        raise ValueError(
            f"{index_path}: dataset.objective is {objective.name!r}, but pretrain.model.family "
            f"{family!r} trains on {expected_objective!r}; set dataset.objective: "
            f"{expected_objective} or pretrain.model.family: {objective.model_family}")
    return objective.loss(index, index_path, span_boundary=span_boundary, variant=variant)


def build_batch_builder(index: dict[str, Any], seed: int) -> BatchBuilder:
    """The batch builder of the objective the dataset `index` was built for: what a
    caller hands stages.data's loaders (`batch_builder=build_batch_builder`)."""
    return _index_objective(index).batch_builder(index, seed)
