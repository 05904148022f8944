"""Causal language modelling (GPT): every position predicts the next token of its row."""

from __future__ import annotations

import torch

from stages.objectives.output import ObjectiveOutput, prediction_loss


def next_token_loss(logits: torch.Tensor, input_ids: torch.Tensor,
                    label_smoothing: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    """prediction_loss of logits (B, T, V) for the tokens of input_ids (B, T): position t
    predicts token t + 1; a row's last position has nothing to predict. The shift is
    inside, so that a compiled loss (stages/training/parallelize.apply_compile_to_loss)
    reads the logits where they are instead of copying the shifted slice first."""
    return prediction_loss(logits[:, :-1].flatten(0, 1), input_ids[:, 1:].flatten(), label_smoothing)


class CausalLM:
    """batch: input_ids (B, T). Part "clm": the B * (T - 1) next-token predictions."""

    family = "gpt"
    parts = ("clm",)
    loss_fn = staticmethod(next_token_loss)  # compiled from outside with pretrain.compile

    def __init__(self, seq_len: int):
        self.tokens_per_sample = seq_len

    def __call__(self, model, batch: dict[str, torch.Tensor], label_smoothing: float = 0.0) -> ObjectiveOutput:
        input_ids = batch["input_ids"]  # (B, T)
        logits = model(input_ids)  # (B, T, V)
        loss, stats = self.loss_fn(logits, input_ids, label_smoothing)
        return ObjectiveOutput(loss=loss, parts={"clm": stats})

    def flops_per_sample(self, model) -> int:
        """Training FLOPs of one row (forward + backward), from the model's estimate."""
        return model.flops_per_token(self.tokens_per_sample) * self.tokens_per_sample
