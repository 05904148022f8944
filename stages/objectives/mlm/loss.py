"""Masked language modelling (BERT), with next-sentence or sentence-order prediction
when the dataset holds sentence pairs with a label (sentence_task nsp / sop), and
SpanBERT's span boundary objective when the model has its head."""

from __future__ import annotations

import torch

from stages.objectives.output import ObjectiveOutput, prediction_loss

SENTENCE_TASKS = ("nsp", "sop", "none")


class MaskedLM:
    """batch: input_ids, attention_mask, token_type_ids, labels (B, T), -100 where
    nothing is predicted; next_sentence_label (B,) for nsp / sop.

    Part "mlm": the masked positions only. Part "nsp" or "sop" (the dataset's
    sentence_task; none with "none"): one 2-way prediction per row from the pooled
    [CLS]. Part "sbo" (span_boundary: the model was built with span_boundary_objective):
    the masked tokens predicted again from their span's boundaries
    (stages/models/bert/span_boundary.py), SpanBERT's loss term. The loss is their sum, as in
    BERT and SpanBERT."""

    family = "bert"
    loss_fn = staticmethod(prediction_loss)  # compiled from outside with pretrain.compile

    def __init__(self, seq_len: int, sentence_task: str, span_boundary: bool = False):
        if sentence_task not in SENTENCE_TASKS:
            raise ValueError(f"sentence_task must be one of {SENTENCE_TASKS}, got {sentence_task!r}")
        self.tokens_per_sample = seq_len
        self.sentence_task = sentence_task
        self.parts = ("mlm",) if sentence_task == "none" else ("mlm", sentence_task)
        self.span_boundary = span_boundary
        if span_boundary:  # last: the other parts keep their places
            self.parts += ("sbo",)

    def __call__(self, model, batch: dict[str, torch.Tensor], label_smoothing: float = 0.0) -> ObjectiveOutput:
        # With SBO the labels also say where the spans are: a third output comes back
        span_labels = {"span_boundary_labels": batch["labels"]} if self.span_boundary else {}
        mlm_logits, pair_logits, *sbo = model(
            batch["input_ids"], attention_mask=batch["attention_mask"],
            token_type_ids=batch["token_type_ids"], **span_labels)  # (B, T, V), (B, 2)
        loss, mlm = self.loss_fn(mlm_logits.flatten(0, 1), batch["labels"].flatten(), label_smoothing)
        parts = {"mlm": mlm}
        if self.sentence_task != "none":
            pair_loss, parts[self.sentence_task] = self.loss_fn(
                pair_logits, batch["next_sentence_label"], label_smoothing)
            loss = loss + pair_loss
        if self.span_boundary:
            (predictions,) = sbo  # logits (N, V), targets (N,)
            sbo_loss, parts["sbo"] = self.loss_fn(predictions.logits, predictions.targets, label_smoothing)
            loss = loss + sbo_loss
        return ObjectiveOutput(loss=loss, parts=parts)

    def flops_per_sample(self, model) -> int:
        """Every position is encoded (padding too: the batch is dense)."""
        return model.flops_per_token(self.tokens_per_sample) * self.tokens_per_sample
