"""Causal language modelling (GPT): every position predicts the next token of its row."""

from __future__ import annotations

import torch

from stages.pretrain.objectives.base import ObjectiveOutput, prediction_loss


class CausalLM:
    """batch: input_ids (B, T). Part "clm": the B * (T - 1) next-token predictions."""

    family = "gpt"
    parts = ("clm",)

    def __init__(self, seq_len: int):
        self.tokens_per_sample = seq_len

    def __call__(self, model, batch: dict[str, torch.Tensor], label_smoothing: float = 0.0) -> ObjectiveOutput:
        input_ids = batch["input_ids"]  # (B, T)
        logits, _ = model(input_ids)  # (B, T, V)
        # Position t predicts token t + 1; a row's last position has nothing to predict.
        loss, stats = prediction_loss(logits[:, :-1].flatten(0, 1), input_ids[:, 1:].flatten(), label_smoothing)
        return ObjectiveOutput(loss=loss, parts={"clm": stats})

    def flops_per_sample(self, model) -> int:
        """Training FLOPs of one row (forward + backward), from the model's estimate."""
        return model.flops_per_token(self.tokens_per_sample) * self.tokens_per_sample
