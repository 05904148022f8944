"""Per-request sums of token log-probabilities, from the logits of the scored positions
only: the vocabulary projection and softmax cost O(V) per position, so scorers never
compute them for context tokens. With `project`, the logits are made and dropped a chunk
of positions at a time: a batch of rows of the model's whole context, every position
scored (an empty-context task packed into full rows), would otherwise hold (B * T, V)
floats at once (32 x 512 positions x 8192 tokens: 0.5 GB; at GPT-2's vocabulary, 3.4 GB)."""

from __future__ import annotations

from collections.abc import Callable

import torch

POSITIONS_PER_CHUNK = 2048  # (2048, V) float32 logits: 64 MB at V = 8192, 412 MB at 50,257


def sum_by_request(logits: torch.Tensor, targets: torch.Tensor, segments: torch.Tensor,
                   num_requests: int, project: Callable[[torch.Tensor], torch.Tensor] | None = None,
                   chunk: int = POSITIONS_PER_CHUNK) -> tuple[list[float], list[bool]]:
    """logits (N, V) at N scored positions (or, with `project`, the hidden states (N, C)
    that project maps to logits), targets (N,) the true tokens, segments (N,) which
    request each position belongs to -> (summed log-probs, every token argmax) per
    request. Sums accumulate in float64: a long document's total would lose its last
    digits in float32."""
    token_logprobs, misses = [], []
    step = chunk if project is not None else max(1, logits.size(0))
    for start in range(0, logits.size(0), step):
        part = logits[start:start + step]
        part = (project(part) if project is not None else part).float()  # (n, V)
        wanted = targets[start:start + step]
        token_logprobs.append(part.gather(1, wanted[:, None]).squeeze(1) - part.logsumexp(dim=-1))  # (n,)
        misses.append((part.argmax(dim=-1) != wanted).long())  # (n,)
    sums = torch.zeros(num_requests, dtype=torch.float64, device=logits.device)
    missed = torch.zeros(num_requests, dtype=torch.long, device=logits.device)
    if token_logprobs:
        sums.index_add_(0, segments, torch.cat(token_logprobs).double())
        missed.index_add_(0, segments, torch.cat(misses))
    return sums.tolist(), (missed == 0).tolist()
