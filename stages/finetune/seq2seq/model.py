"""The models a sequence-to-sequence task trains: teacher forcing with label smoothing to
train, batched KV-cached decoding (greedy or beam search with a length penalty) to predict.

    model = EncoderDecoderSeq2Seq(t5_or_transformer, width, decoding, label_smoothing=0.1)
    model = DecoderOnlySeq2Seq(gpt, width, decoding, label_smoothing=0.1, end_id=0, pad_id=1)
    logits, loss = model(input_ids, attention_mask, labels=labels)     # training
    ids, _ = model(input_ids, attention_mask)                           # (B, width) floats, -1 after the end

Prediction outputs have a fixed width (the ranks' shards concatenate, as every head's
outputs do): the generated ids, -1 after the first end token. Each batch generates at
most its longest source length + decoding.extra_length tokens (the Transformer paper's
"input length + 50"), and never more than `width`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from stages.data.masking import IGNORE_INDEX
from stages.finetune.text_to_text.model import TextToTextModel


@dataclass(frozen=True)
class Decoding:
    """num_beams 1 = greedy; length_penalty: beam search's exponent on the length."""

    num_beams: int = 1
    length_penalty: float = 1.0
    extra_length: int = 50

    @classmethod
    def from_config(cls, cfg) -> "Decoding":  # finetune.decoding (DecodingConfig)
        return cls(num_beams=cfg.num_beams, length_penalty=cfg.length_penalty, extra_length=cfg.extra_length)


def smoothed_loss(logits: torch.Tensor, labels: torch.Tensor, label_smoothing: float) -> torch.Tensor:
    """Mean cross-entropy over the labelled positions (-100: none), with label smoothing
    (Szegedy et al. 2016; the Transformer paper's eps_ls = 0.1)."""
    return F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(), ignore_index=IGNORE_INDEX,
                           label_smoothing=label_smoothing)


def set_dropout(model: nn.Module, p: float) -> None:
    """Every dropout of `model` to p: the nn.Dropout layers, and attention-probability
    dropout where the architecture has it (T5; the original Transformer has none)."""
    for module in model.modules():
        if isinstance(module, nn.Dropout):
            module.p = p
        elif isinstance(getattr(module, "dropout", None), float) and module.dropout > 0:
            module.dropout = p


def trimmed(input_ids: torch.Tensor, attention_mask: torch.Tensor | None,
            labels: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """The batch without the padding columns that no row uses: rows are padded to the
    task's max lengths, most captions are a third of that, and attention and the LM head
    cost the same on padding as on text. Right padding only, so nothing real moves."""
    if attention_mask is not None:
        width = int(attention_mask.sum(dim=1).max())
        input_ids, attention_mask = input_ids[:, :width], attention_mask[:, :width]
    if labels is not None:
        used = (labels != IGNORE_INDEX).any(dim=0).nonzero()
        labels = labels[:, :int(used.max()) + 1] if used.numel() else labels[:, :1]
    return input_ids, attention_mask, labels


def _fixed_width(ids: torch.Tensor, end_id: int, width: int) -> torch.Tensor:
    """(B, n) generated ids -> (B, width) floats, -1 after the first end token."""
    is_end = (ids == end_id).long()
    ids = ids.masked_fill(is_end.cumsum(dim=1) - is_end > 0, -1)[:, :width]
    padded = torch.full((ids.size(0), width), -1, dtype=torch.long, device=ids.device)
    padded[:, :ids.size(1)] = ids
    return padded.float()


class EncoderDecoderSeq2Seq(TextToTextModel):
    """A T5 or the original Transformer. A TextToTextModel (whose `max_target_len` is the
    output width), so that the export and the saved-model loader treat it as one."""

    def __init__(self, backbone: nn.Module, width: int, decoding: Decoding = Decoding(),
                 label_smoothing: float = 0.0):
        super().__init__(backbone, width)
        self.decoding, self.label_smoothing = decoding, label_smoothing

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                labels: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        if labels is not None:
            input_ids, attention_mask, labels = trimmed(input_ids, attention_mask, labels)
            logits, _ = self.backbone(input_ids, attention_mask, labels=labels)  # (B, T, V)
            return logits, smoothed_loss(logits, labels, self.label_smoothing)
        from stages.models.generation import generate_seq2seq

        input_ids, attention_mask, _ = trimmed(input_ids, attention_mask)
        end = self.backbone.config.eos_token_id
        import torch.distributed as dist

        # ZeRO-3 (greedy only; seq2seq.family refuses beams there): every rank decodes the
        # same number of steps, so the limit is the fixed width, not this rank's longest source.
        synced = dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1 and \
            self.decoding.num_beams == 1 and getattr(self, "synced_ranks", False)
        limit = self.max_target_len if synced else min(self.max_target_len, input_ids.size(1) + self.decoding.extra_length)
        ids = generate_seq2seq(self.backbone, input_ids, attention_mask, max_new_tokens=limit,
                               num_beams=self.decoding.num_beams, length_penalty=self.decoding.length_penalty,
                               eos_token_id=end, synced_ranks=synced)[:, 1:]  # the decoder start token dropped
        return _fixed_width(ids, end, self.max_target_len), None


class DecoderOnlySeq2Seq(nn.Module):
    """A GPT on `source + separator + target`: the loss on the target tokens only (labels
    are -100 elsewhere); predicts by continuing `source + separator`."""

    def __init__(self, backbone: nn.Module, width: int, decoding: Decoding = Decoding(),
                 label_smoothing: float = 0.0, end_id: int = 0):
        super().__init__()
        self.backbone = backbone
        self.width, self.decoding, self.label_smoothing, self.end_id = width, decoding, label_smoothing, end_id

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                labels: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        if labels is not None:  # one sequence: source, separator and target share the columns
            width = int(attention_mask.sum(dim=1).max()) if attention_mask is not None else input_ids.size(1)
            input_ids, labels = input_ids[:, :width], labels[:, :width]
            attention_mask = attention_mask[:, :width] if attention_mask is not None else None
            logits = self.backbone(input_ids, attention_mask=attention_mask)  # (B, T, V): a GPT returns logits only
            # Position t predicts token t + 1.
            return logits, smoothed_loss(logits[:, :-1], labels[:, 1:], self.label_smoothing)
        return self._generate(input_ids, attention_mask), None

    def _generate(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
        from stages.models.generation import generate

        lengths = (attention_mask.sum(dim=1) if attention_mask is not None
                   else torch.full((input_ids.size(0),), input_ids.size(1), device=input_ids.device))
        out = torch.full((input_ids.size(0), self.width), -1.0, device=input_ids.device)
        # GPT prompts in one generate call must have one length (no padding): one call per length.
        for length in sorted(set(lengths.tolist())):
            rows = (lengths == length).nonzero().flatten()
            room = self.backbone.config.max_seq_len - length
            if room < 1:
                raise ValueError(f"a prompt of {length} tokens leaves no room to generate in the GPT's max_seq_len="
                                 f"{self.backbone.config.max_seq_len}; lower the task's max_source_len")
            source_len = length  # the separator included: close enough for the length limit
            new = min(self.width, source_len + self.decoding.extra_length, room)
            ids = generate(self.backbone, input_ids[rows, :length], new, eos_token_id=self.end_id,
                           num_beams=self.decoding.num_beams, length_penalty=self.decoding.length_penalty)
            out[rows] = _fixed_width(ids[:, length:], self.end_id, self.width)
        return out
