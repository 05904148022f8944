"""T5 span corruption, numpy only: the arithmetic of `random_spans_helper`, the noise
mask of `random_spans_noise_mask`, and the sentinel rewrite of `noise_span_to_unique_
sentinel` / `nonnoise_span_to_unique_sentinel` (google-research/text-to-text-transfer-
transformer, t5/data/preprocessors.py), plus the inverse used by the tests.

    tokens  a b c d e f g h          mask  . . x x . . . x
    inputs  a b <s0> e f g <s1> </s>
    targets <s0> c d <s1> h </s>
Sentinels are numbered in order of appearance; <s_i> is `sentinel_ids[i]`.
"""

from __future__ import annotations

import numpy as np


def _lengths_for(tokens_length: int, noise_density: float,
                 mean_noise_span_length: float) -> tuple[int, int]:
    num_noise_tokens = int(round(tokens_length * noise_density))
    num_nonnoise_tokens = tokens_length - num_noise_tokens
    num_noise_spans = int(round(num_noise_tokens / mean_noise_span_length))
    # inputs: every non-noise token, one sentinel per span, </s>; targets: the mirror image
    return (num_nonnoise_tokens + num_noise_spans + 1, num_noise_tokens + num_noise_spans + 1)


def random_spans_helper(inputs_length: int, noise_density: float = 0.15,
                        mean_noise_span_length: float = 3.0) -> tuple[int, int]:
    """(raw tokens per example, targets length) so that corrupted inputs are exactly
    `inputs_length` long (</s> included); T5's helper: 512 -> (568, 114)."""
    tokens_length = inputs_length - 1
    while _lengths_for(tokens_length + 1, noise_density, mean_noise_span_length)[0] <= inputs_length:
        tokens_length += 1
    inputs, targets = _lengths_for(tokens_length, noise_density, mean_noise_span_length)
    if noise_density == 0.5 and targets > inputs:  # T5's hack: keep the round number
        tokens_length -= 1
        targets -= 1
    return tokens_length, targets


def num_noise_spans(length: int, noise_density: float, mean_noise_span_length: float) -> int:
    num_noise = min(max(int(round(length * noise_density)), 1), length - 1)
    return max(int(round(num_noise / mean_noise_span_length)), 1)


def random_spans_noise_mask(length: int, noise_density: float, mean_noise_span_length: float,
                            rng: np.random.Generator) -> np.ndarray:
    """Boolean (length,): True = noise. Non-noise first, then alternating spans; the
    number of noise tokens and spans is fixed by the length, their sizes are random."""
    orig_length, length = length, max(length, 2)
    num_noise = min(max(int(round(length * noise_density)), 1), length - 1)
    num_spans = num_noise_spans(length, noise_density, mean_noise_span_length)
    noise_lengths = _random_segmentation(num_noise, num_spans, rng)
    nonnoise_lengths = _random_segmentation(length - num_noise, num_spans, rng)
    interleaved = np.stack([nonnoise_lengths, noise_lengths], axis=1).reshape(-1)
    span_starts = np.cumsum(interleaved)[:-1]
    indicator = np.zeros(length, dtype=np.int64)
    indicator[span_starts] = 1
    return (np.cumsum(indicator) % 2 == 1)[:orig_length]


def _random_segmentation(num_items: int, num_segments: int,
                         rng: np.random.Generator) -> np.ndarray:
    """Split num_items into num_segments non-empty parts, uniformly at random."""
    first_in_segment = np.zeros(num_items, dtype=np.int64)
    first_in_segment[1:] = rng.permutation(np.arange(num_items - 1) < num_segments - 1)
    segment_id = np.cumsum(first_in_segment)
    return np.bincount(segment_id, minlength=num_segments)


def corrupt(tokens: np.ndarray, noise_mask: np.ndarray, sentinel_ids: np.ndarray,
            eos_id: int) -> tuple[np.ndarray, np.ndarray]:
    """(inputs, targets), each ending with </s>."""
    return (_replace_spans(tokens, noise_mask, sentinel_ids, eos_id),
            _replace_spans(tokens, ~noise_mask, sentinel_ids, eos_id))


def _replace_spans(tokens: np.ndarray, mask: np.ndarray, sentinel_ids: np.ndarray,
                   eos_id: int) -> np.ndarray:
    """Each run of masked tokens -> one sentinel, numbered by the run's position among
    all spans (noise spans and the non-noise spans between them share the numbering)."""
    previous = np.concatenate([[False], mask[:-1]])
    span_starts = mask & ~previous
    # T5 numbers the sentinels of a side by that side's own span count.
    sentinel = sentinel_ids[np.cumsum(span_starts) - 1]
    out = np.where(span_starts, sentinel, tokens)[~(mask & previous)]
    return np.concatenate([out, [eos_id]]).astype(tokens.dtype)


def reconstruct(inputs: np.ndarray, targets: np.ndarray, sentinel_ids: np.ndarray,
                eos_id: int) -> np.ndarray:
    """The original tokens from (inputs, targets): sentinel i in the inputs is replaced by
    what follows sentinel i in the targets. Inverse of `corrupt`, for tests and debugging."""
    sentinel_index = {int(s): i for i, s in enumerate(sentinel_ids)}
    assert inputs[-1] == eos_id and targets[-1] == eos_id
    spans: dict[int, list[int]] = {}
    current = None
    for token in targets[:-1].tolist():
        if token in sentinel_index:
            current = sentinel_index[token]
            spans[current] = []
        else:
            spans[current].append(token)
    out: list[int] = []
    for token in inputs[:-1].tolist():
        out += spans[sentinel_index[token]] if token in sentinel_index else [token]
    return np.array(out, dtype=inputs.dtype)
