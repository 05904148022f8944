"""T5 span corruption: the encoder reads the corrupted row, the decoder writes the
dropped spans behind their sentinels (teacher forcing)."""

from __future__ import annotations

import torch

from stages.objectives.output import ObjectiveOutput, prediction_loss


class SpanCorruption:
    """batch: input_ids, attention_mask (B, S); labels, decoder_input_ids (B, T).
    Part "span": every target token (-100 ones skipped)."""

    family = "t5"
    parts = ("span",)
    loss_fn = staticmethod(prediction_loss)  # compiled from outside with pretrain.compile

    def __init__(self, seq_len: int, targets_length: int):
        self.seq_len, self.targets_length = seq_len, targets_length
        self.tokens_per_sample = seq_len + targets_length  # encoder + decoder tokens

    def __call__(self, model, batch: dict[str, torch.Tensor], label_smoothing: float = 0.0) -> ObjectiveOutput:
        logits, _ = model(batch["input_ids"], attention_mask=batch["attention_mask"],
                          decoder_input_ids=batch["decoder_input_ids"])  # (B, T, V)
        loss, stats = self.loss_fn(logits.flatten(0, 1), batch["labels"].flatten(), label_smoothing)
        return ObjectiveOutput(loss=loss, parts={"span": stats})

    def flops_per_sample(self, model) -> int:
        return model.flops_per_example(self.seq_len, self.targets_length)
