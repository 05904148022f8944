"""Task heads on top of a pretrained backbone (GPT or BERT). Imports only torch.

    backbone = load_pretrained("runs/.../pretrain/<fp>/model")
    model = GPTForSequenceClassification(backbone, num_labels=2)
    logits, loss = model(input_ids, attention_mask, labels)   # (B, num_labels), scalar

    BertForSequenceClassification(bert, num_labels)   pooled [CLS] -> labels (or 1 = regression)
    ElectraForSequenceClassification(bert, num_labels) [CLS] -> dense -> GELU -> labels (ELECTRA has no pooler)
    SpanExtractionModel(backbone)                     start/end logits per token (extractive QA)
    TokenClassificationModel(backbone, num_labels)    a label per token (NER, tagging)

The last two take any backbone with `hidden_states(input_ids, attention_mask, **extra)`
(GPT, Bert); extra keyword arguments (BERT's token_type_ids) are passed through.
Layouts follow Hugging Face's *ForSequenceClassification / *ForQuestionAnswering /
*ForTokenClassification, so head weights map across one to one.

GPTForSequenceClassification: a decoder sees only the past, so the sequence summary is the hidden state of the last
real (non-padding) token: the only position that has read the whole input. Works with
right or left padding. As in Hugging Face's GPT2ForSequenceClassification, the score
layer has no bias, so its weights map across one to one.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from stages.data.masking import IGNORE_INDEX
from stages.models.bert.model import Bert, init_bert_weights
from stages.models.gpt.model import GPT


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


def _classification_loss(logits: torch.Tensor, labels: torch.Tensor, num_labels: int) -> torch.Tensor:
    if num_labels == 1:
        return F.mse_loss(logits.squeeze(-1).float(), labels.float())
    return F.cross_entropy(logits.float(), labels.long())


class BertForSequenceClassification(nn.Module):
    """Classification (cross-entropy) or regression (num_labels == 1, MSE) from BERT's
    pooled [CLS] (tanh pooler), as Hugging Face's BertForSequenceClassification."""

    def __init__(self, backbone: Bert, num_labels: int, dropout: float | None = None):
        super().__init__()
        if num_labels < 1:
            raise ValueError(f"num_labels must be >= 1 (1 means regression), got {num_labels}")
        self.backbone = backbone
        self.num_labels = num_labels
        self.dropout = nn.Dropout(backbone.config.dropout if dropout is None else dropout)
        self.classifier = nn.Linear(backbone.config.hidden_size, num_labels)
        nn.init.normal_(self.classifier.weight, std=0.02)
        nn.init.zeros_(self.classifier.bias)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                labels: torch.Tensor | None = None, token_type_ids: torch.Tensor | None = None,
                ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Returns (logits (B, num_labels), loss or None)."""
        _, pooled = self.backbone(input_ids, attention_mask, token_type_ids)  # (B, C)
        logits = self.classifier(self.dropout(pooled))  # (B, num_labels)
        loss = None if labels is None else _classification_loss(logits, labels, self.num_labels)
        return logits, loss


class ElectraForSequenceClassification(nn.Module):
    """Classification or regression (num_labels == 1, MSE) on an ELECTRA discriminator,
    as Hugging Face's ElectraForSequenceClassification: [CLS] -> dropout -> dense C -> C
    -> GELU -> dropout -> out. ELECTRA has no pooler; this head brings the dense layer."""

    def __init__(self, backbone: Bert, num_labels: int, dropout: float | None = None):
        super().__init__()
        if num_labels < 1:
            raise ValueError(f"num_labels must be >= 1 (1 means regression), got {num_labels}")
        C = backbone.config.hidden_size
        self.backbone = backbone
        self.num_labels = num_labels
        self.dropout = nn.Dropout(backbone.config.dropout if dropout is None else dropout)
        self.dense = nn.Linear(C, C)  # HF: classifier.dense
        self.classifier = nn.Linear(C, num_labels)  # HF: classifier.out_proj
        for module in (self.dense, self.classifier):
            init_bert_weights(module)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                labels: torch.Tensor | None = None, token_type_ids: torch.Tensor | None = None,
                ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Returns (logits (B, num_labels), loss or None)."""
        hidden = self.backbone.hidden_states(input_ids, attention_mask, token_type_ids)  # (B, T, C)
        x = F.gelu(self.dense(self.dropout(hidden[:, 0])))  # (B, C)
        logits = self.classifier(self.dropout(x))  # (B, num_labels)
        loss = None if labels is None else _classification_loss(logits, labels, self.num_labels)
        return logits, loss


class SpanExtractionModel(nn.Module):
    """Start and end logits per token (SQuAD-style extractive QA)."""

    def __init__(self, backbone: nn.Module):
        super().__init__()
        self.backbone = backbone
        self.span_head = nn.Linear(backbone.config.hidden_size, 2)  # HF: qa_outputs
        nn.init.normal_(self.span_head.weight, std=0.02)
        nn.init.zeros_(self.span_head.bias)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                start_positions: torch.Tensor | None = None, end_positions: torch.Tensor | None = None,
                **backbone_inputs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """Returns (start logits (B, T), end logits (B, T), loss or None). Positions (B,)
        outside the sequence (e.g. truncated answers) are clamped to T and ignored."""
        hidden = self.backbone.hidden_states(input_ids, attention_mask, **backbone_inputs)  # (B, T, C)
        start_logits, end_logits = self.span_head(hidden).unbind(dim=-1)  # 2 x (B, T)
        loss = None
        if start_positions is not None and end_positions is not None:
            T = start_logits.size(1)
            start = start_positions.clamp(0, T).masked_fill(start_positions >= T, IGNORE_INDEX)
            end = end_positions.clamp(0, T).masked_fill(end_positions >= T, IGNORE_INDEX)
            loss = 0.5 * (
                F.cross_entropy(start_logits.float(), start, ignore_index=IGNORE_INDEX)
                + F.cross_entropy(end_logits.float(), end, ignore_index=IGNORE_INDEX)
            )
        return start_logits, end_logits, loss


class TokenClassificationModel(nn.Module):
    """A label per token (named entities, part-of-speech tags)."""

    def __init__(self, backbone: nn.Module, num_labels: int, dropout: float | None = None):
        super().__init__()
        if num_labels < 2:
            raise ValueError(f"token classification needs num_labels >= 2, got {num_labels}")
        self.backbone = backbone
        self.num_labels = num_labels
        self.dropout = nn.Dropout(backbone.config.dropout if dropout is None else dropout)
        self.classifier = nn.Linear(backbone.config.hidden_size, num_labels)
        nn.init.normal_(self.classifier.weight, std=0.02)
        nn.init.zeros_(self.classifier.bias)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                labels: torch.Tensor | None = None, **backbone_inputs: torch.Tensor,
                ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Returns (logits (B, T, num_labels), loss or None); labels (B, T), -100 = ignore
        (padding, word-piece continuations)."""
        hidden = self.backbone.hidden_states(input_ids, attention_mask, **backbone_inputs)  # (B, T, C)
        logits = self.classifier(self.dropout(hidden))  # (B, T, num_labels)
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(), ignore_index=IGNORE_INDEX)
        return logits, loss
