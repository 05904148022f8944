"""Per-request sums of token log-probabilities, from the logits of the scored positions
only: the vocabulary projection and softmax cost O(V) per position, so scorers never
compute them for context tokens."""

from __future__ import annotations

import torch


def sum_by_request(logits: torch.Tensor, targets: torch.Tensor, segments: torch.Tensor,
                   num_requests: int) -> tuple[list[float], list[bool]]:
    """logits (N, V) at N scored positions, targets (N,) the true tokens, segments (N,)
    which request each position belongs to -> (summed log-probs, every token argmax) per
    request. Sums accumulate in float64: a long document's total would lose its last
    digits in float32."""
    logits = logits.float()
    token_logprobs = logits.gather(1, targets[:, None]).squeeze(1) - logits.logsumexp(dim=-1)  # (N,)
    misses = (logits.argmax(dim=-1) != targets).long()  # (N,)
    sums = torch.zeros(num_requests, dtype=torch.float64, device=logits.device)
    sums.index_add_(0, segments, token_logprobs.double())
    missed = torch.zeros(num_requests, dtype=torch.long, device=logits.device).index_add_(0, segments, misses)
    return sums.tolist(), (missed == 0).tolist()
