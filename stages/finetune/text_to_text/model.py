"""The T5 that fine-tunes as text to text: teacher forcing to train, greedy decoding (or
ranking the label words, `glue.rank`) to predict."""

from __future__ import annotations

import torch
import torch.nn as nn

from stages.data.masking import IGNORE_INDEX


class TextToTextModel(nn.Module):
    """A T5 trained on (source, target) pairs. With labels: (logits, loss) by teacher
    forcing. Without: the greedy generation, (ids (B, max_target_len) as floats, -1
    after </s>, None), so that prediction handles it like any head's outputs (a fixed
    width, so the ranks' shards concatenate). With `label_targets` set (C, L): instead,
    each target's log-likelihood, (scores (B, C), None), like a classifier's logits."""

    def __init__(self, backbone: nn.Module, max_target_len: int):
        super().__init__()
        self.backbone = backbone  # the T5 (named like the other heads' backbones)
        self.max_target_len = max_target_len
        # Not a buffer: a prediction setting, kept out of the saved weights.
        self.label_targets: torch.Tensor | None = None

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                labels: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        if labels is not None:
            return self.backbone(input_ids, attention_mask, labels=labels)
        if self.label_targets is not None:
            targets = self.label_targets.to(input_ids.device)
            return label_log_likelihoods(self.backbone, input_ids, attention_mask, targets), None
        from stages.models.generation import generate_seq2seq

        eos = self.backbone.config.eos_token_id
        import torch.distributed as dist

        # All ranks decode the same number of steps: under ZeRO-3 each step is collective.
        synced = dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1
        ids = generate_seq2seq(self.backbone, input_ids, attention_mask, max_new_tokens=self.max_target_len,
                               eos_token_id=eos, synced_ranks=synced)[:, 1:]  # (B, n <= max_target_len), start token dropped
        # -1 after the first </s> (greedy decoding keeps emitting it for finished rows).
        is_eos = (ids == eos).long()
        ids = ids.masked_fill(is_eos.cumsum(dim=1) - is_eos > 0, -1)
        padded = torch.full((ids.size(0), self.max_target_len), -1, dtype=torch.long, device=ids.device)
        padded[:, :ids.size(1)] = ids
        return padded.float(), None


def label_log_likelihoods(backbone, input_ids: torch.Tensor, attention_mask: torch.Tensor | None,
                          targets: torch.Tensor) -> torch.Tensor:
    """log P(target | source) summed over each target's tokens: (B, num_targets).
    targets: (C, L) ids, IGNORE_INDEX after </s>."""
    batch, num_targets = input_ids.size(0), targets.size(0)
    memory = backbone.encode(input_ids, attention_mask)  # (B, S, H)
    # Row b * C + c pairs source b with target c.
    memory = memory.repeat_interleave(num_targets, dim=0)  # (B*C, S, H)
    mask = None if attention_mask is None else attention_mask.repeat_interleave(num_targets, dim=0)  # (B*C, S)
    tiled = targets.repeat(batch, 1)  # (B*C, L)
    logits = backbone.decode(backbone.shift_right(tiled), memory, mask)  # (B*C, L, V)
    log_probs = logits.float().log_softmax(dim=-1)
    scored = tiled != IGNORE_INDEX
    token_log_probs = log_probs.gather(-1, tiled.clamp(min=0).unsqueeze(-1)).squeeze(-1)  # (B*C, L)
    return (token_log_probs * scored).sum(dim=1).view(batch, num_targets)
