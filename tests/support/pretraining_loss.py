"""The pretraining losses of a model's outputs, for tests that train or compare a bare
model: computed by the objectives' own functions (stages/objectives/), the one place the
pretraining losses live; the models return logits only."""

from __future__ import annotations

import torch

from stages.objectives.clm.loss import next_token_loss
from stages.objectives.output import prediction_loss


def causal_lm_loss(logits: torch.Tensor, input_ids: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy of logits (B, T, V) for input_ids (B, T); -100 skipped."""
    return next_token_loss(logits, input_ids)[0]


def bert_pretraining_loss(mlm_logits: torch.Tensor, pair_logits: torch.Tensor, labels: torch.Tensor,
                          pair_labels: torch.Tensor | None = None) -> torch.Tensor:
    """MLM cross-entropy over labels (B, T) (-100 skipped), plus the sentence-pair one
    over pair_labels (B,) when given: Hugging Face BertForPreTraining's loss."""
    loss = prediction_loss(mlm_logits.flatten(0, 1), labels.flatten())[0]
    if pair_labels is not None:
        loss = loss + prediction_loss(pair_logits, pair_labels)[0]
    return loss
