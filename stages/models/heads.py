"""Task heads on top of a pretrained GPT backbone. Imports only torch.

    backbone = load_pretrained("runs/.../pretrain/<fp>/model")
    model = GPTForSequenceClassification(backbone, num_labels=2)
    logits, loss = model(input_ids, attention_mask, labels)   # (B, num_labels), scalar

A decoder sees only the past, so the sequence summary is the hidden state of the last
real (non-padding) token: the only position that has read the whole input. Works with
right or left padding. As in Hugging Face's GPT2ForSequenceClassification, the score
layer has no bias, so its weights map across one to one.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from stages.models.gpt import GPT


class GPTForSequenceClassification(nn.Module):
    """Classification (num_labels >= 2, cross-entropy) or regression (num_labels == 1,
    mean squared error) from the last real token's hidden state."""

    def __init__(self, backbone: GPT, num_labels: int, dropout: float | None = None):
        super().__init__()
        if num_labels < 1:
            raise ValueError(f"num_labels must be >= 1 (1 means regression), got {num_labels}")
        self.backbone = backbone
        self.num_labels = num_labels
        hidden_size = backbone.config.hidden_size
        self.dropout = nn.Dropout(backbone.config.dropout if dropout is None else dropout)
        self.score = nn.Linear(hidden_size, num_labels, bias=False)
        nn.init.normal_(self.score.weight, mean=0.0, std=0.02)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """input_ids, attention_mask: (B, T); labels: (B,) class ids, or floats when
        num_labels == 1. Returns (logits (B, num_labels), loss or None)."""
        hidden = self.backbone.hidden_states(input_ids, attention_mask)  # (B, T, C)
        last = last_token_index(input_ids, attention_mask)  # (B,)
        batch = torch.arange(hidden.size(0), device=hidden.device)  # (B,)
        pooled = hidden[batch, last]  # (B, C)
        logits = self.score(self.dropout(pooled))  # (B, num_labels)
        loss = None
        if labels is not None:
            if self.num_labels == 1:
                loss = F.mse_loss(logits.squeeze(-1).float(), labels.float())
            else:
                loss = F.cross_entropy(logits.float(), labels.long())
        return logits, loss


def last_token_index(
    input_ids: torch.Tensor, attention_mask: torch.Tensor | None
) -> torch.Tensor:
    """Index of the last real token per row, (B,). Without a mask: the last position."""
    B, T = input_ids.shape
    if attention_mask is None:
        return torch.full((B,), T - 1, dtype=torch.long, device=input_ids.device)
    positions = torch.arange(T, device=attention_mask.device)  # (T,)
    # Largest position whose mask is 1 (right or left padding); all-padding rows give 0.
    return (attention_mask.long() * positions).argmax(dim=-1)  # (B,)
