"""What every pretraining objective shares: its output, and the cross-entropy with
accuracy that each of its parts (clm, mlm, nsp, sop, span) is scored by.

An objective is a callable `objective(model, batch, label_smoothing) -> ObjectiveOutput`
(model: the bare module or the DeepSpeed engine around it; batch: the loader's dict of
tensors, on the model's device). Each part reports summable statistics, not means, so
that the trainer can add them over micro batches, steps and ranks and divide once: a
token-weighted mean that does not depend on how the tokens were batched.

The loss is the sum of the parts' mean losses, each times its weight (1 unless the
objective says otherwise: ELECTRA's rtd part weighs rtd_weight); the output names the
weights, so that the logged loss is the trained one (stages/pretrain/metrics.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from stages.data.masking import IGNORE_INDEX

# Order of the statistics in each part's vector.
LOSS_SUM, NUM_CORRECT, NUM_PREDICTIONS = 0, 1, 2


@dataclass
class ObjectiveOutput:
    loss: torch.Tensor  # scalar: the sum of the parts' mean losses times their weights; what backward() uses
    # part name -> float64 (3,): summed loss, correct predictions, predictions (detached)
    parts: dict[str, torch.Tensor]
    # part name -> its weight in `loss`, for the parts whose weight is not 1
    weights: dict[str, float] = field(default_factory=dict)

    def weight(self, part: str) -> float:
        return self.weights.get(part, 1.0)


def prediction_loss(logits: torch.Tensor, targets: torch.Tensor,
                    label_smoothing: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean cross-entropy of logits (N, V) against targets (N,) over the targets that are
    not IGNORE_INDEX, and the part's statistics (loss sum, correct, count). The loss is
    computed in fp32 whatever the logits' dtype (bf16 log-softmax loses precision)."""
    logits = logits.float()
    keep = targets != IGNORE_INDEX  # (N,)
    loss_sum = F.cross_entropy(logits, targets, ignore_index=IGNORE_INDEX, reduction="sum",
                               label_smoothing=label_smoothing)
    count = keep.sum()
    correct = ((logits.argmax(dim=-1) == targets) & keep).sum()
    # A batch without any target (all -100) has loss 0, not 0/0 = NaN.
    loss = loss_sum / count.clamp(min=1)
    stats = torch.stack([loss_sum.detach().double(), correct.double(), count.double()])
    return loss, stats
