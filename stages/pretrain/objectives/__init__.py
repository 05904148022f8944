"""Pretraining objectives behind one interface (see base.py), chosen by the dataset:

    objective = build_objective(index, family="bert", index_path=...)
    out = objective(engine, batch, label_smoothing=0.1)   # ObjectiveOutput
    engine.backward(out.loss)
    out.parts       # {"mlm": (loss sum, correct, count), "nsp": (...)}

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
from typing import Any

from stages.pretrain.objectives.base import ObjectiveOutput, prediction_loss
from stages.pretrain.objectives.clm import CausalLM
from stages.pretrain.objectives.mlm import MaskedLM
from stages.pretrain.objectives.rtd import ReplacedTokenDetection
from stages.pretrain.objectives.span import SpanCorruption

FAMILY_OF_OBJECTIVE = {"clm": "gpt", "mlm": "bert", "span": "t5"}

__all__ = ["FAMILY_OF_OBJECTIVE", "CausalLM", "MaskedLM", "ObjectiveOutput", "ReplacedTokenDetection",
           "SpanCorruption", "build_objective", "prediction_loss"]


def build_objective(index: dict[str, Any], family: str, index_path: str | Path = "index.json",
                    span_boundary: bool = False, variant: str | None = None):
    """The objective the dataset `index` was built for, checked against the model family.
    span_boundary: the model has SpanBERT's SBO head (BertConfig.span_boundary_objective).
    variant: the model config's; electra trains replaced-token detection on the mlm dataset."""
    objective = index.get("objective", "clm")
    if objective not in FAMILY_OF_OBJECTIVE:
        raise ValueError(f"{index_path}: unknown objective {objective!r}; the dataset stage writes "
                         f"one of {sorted(FAMILY_OF_OBJECTIVE)}: rebuild the dataset")
    expected_family = FAMILY_OF_OBJECTIVE[objective]
    if family != expected_family:
        expected_objective = {f: o for o, f in FAMILY_OF_OBJECTIVE.items()}[family]
        raise ValueError(
            f"{index_path}: dataset.objective is {objective!r}, but pretrain.model.family "
            f"{family!r} trains on {expected_objective!r}; set dataset.objective: "
            f"{expected_objective} or pretrain.model.family: {expected_family}")
    if objective == "mlm" and variant == "electra":
        if index["mlm"]["sentence_task"] != "none":
            raise ValueError(
                f"{index_path}: dataset.mlm.sentence_task is {index['mlm']['sentence_task']!r}, but "
                "pretrain.model.variant electra trains replaced-token detection, which has no sentence-pair "
                "head; set dataset.mlm.sentence_task: none")
        return ReplacedTokenDetection(index["seq_len"])
    if objective == "mlm":
        return MaskedLM(index["seq_len"], index["mlm"]["sentence_task"], span_boundary)
    if objective == "span":
        return SpanCorruption(index["seq_len"], index["span"]["targets_length"])
    return CausalLM(index["seq_len"])
