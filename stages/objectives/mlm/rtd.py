"""Replaced-token detection (ELECTRA, Clark et al. 2020) on masked-LM batches.

The model (`stages.models.bert.electra.ElectraForPreTraining`) runs the generator on the
masked input, samples a replacement for every masked position from its softmax and runs
the discriminator on the original tokens with those replacements; this objective scores
both. Any masking of the mlm dataset works (static or dynamic, 80/10/10, whole words,
spans): the generator predicts every position that has a label, and each of them is
replaced by the generator's sample.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from stages.objectives.output import ObjectiveOutput, prediction_loss

# A fixed stream for validation: the same replacements at every evaluation, and the
# training stream (torch's global generator, seeded per rank and checkpointed) untouched.
VALIDATION_SAMPLER_SEED = 0


class ReplacedTokenDetection:
    """batch: input_ids, attention_mask, token_type_ids, labels (B, T), -100 where
    nothing is masked (the mlm dataset with sentence_task none).

    Part "mlm": the generator's masked-LM predictions (its perplexity is val_perplexity).
    Part "rtd": one binary prediction per real (non-padding) token of the discriminator,
    replaced or original; a replacement that equals the original token is original.

    The loss is mlm + rtd_weight * rtd (each the mean over its predictions; lambda = the
    model's config.rtd_weight, 50 in the paper). The output's weights say so, and the
    logged `loss` / `val_loss` weight the parts the same way (stages/pretrain/metrics.py);
    rtd_loss and mlm_loss are logged unweighted."""

    family = "bert"
    parts = ("mlm", "rtd")
    loss_fn = staticmethod(prediction_loss)  # compiled from outside with pretrain.compile

    def __init__(self, seq_len: int):
        self.tokens_per_sample = seq_len

    def __call__(self, model, batch: dict[str, torch.Tensor], label_smoothing: float = 0.0) -> ObjectiveOutput:
        sampler = None
        if not model.training:
            sampler = torch.Generator(device=batch["input_ids"].device).manual_seed(VALIDATION_SAMPLER_SEED)
        generator_logits, discriminator_logits, replaced = model(
            batch["input_ids"], attention_mask=batch["attention_mask"], token_type_ids=batch["token_type_ids"],
            labels=batch["labels"], sampler=sampler)  # (B, T, V), (B, T), (B, T)
        mlm_loss, mlm = self.loss_fn(generator_logits.flatten(0, 1), batch["labels"].flatten(), label_smoothing)
        rtd_loss, rtd = detection_loss(discriminator_logits, replaced, batch["attention_mask"])
        rtd_weight = float(_unwrapped(model).config.rtd_weight)
        return ObjectiveOutput(loss=mlm_loss + rtd_weight * rtd_loss, parts={"mlm": mlm, "rtd": rtd},
                               weights={"rtd": rtd_weight})

    def flops_per_sample(self, model) -> int:
        """Every position is encoded by both networks (padding too: the batch is dense)."""
        return model.flops_per_token(self.tokens_per_sample) * self.tokens_per_sample


def detection_loss(logits: torch.Tensor, replaced: torch.Tensor,
                   attention_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean binary cross-entropy of logits (B, T) against replaced (B, T) over the real
    tokens (attention_mask 1), in fp32, and the part's statistics (loss sum, correct, count)."""
    real = attention_mask.bool()  # (B, T)
    logits, targets = logits[real].float(), replaced[real].float()  # (M,)
    loss_sum = F.binary_cross_entropy_with_logits(logits, targets, reduction="sum")
    count = real.sum()
    correct = ((logits > 0) == replaced[real]).sum()
    loss = loss_sum / count.clamp(min=1)  # a batch without real tokens has loss 0, not NaN
    stats = torch.stack([loss_sum.detach().double(), correct.double(), count.double()])
    return loss, stats


def _unwrapped(model):
    """The module itself, inside a DeepSpeed engine or not."""
    return getattr(model, "module", model)
