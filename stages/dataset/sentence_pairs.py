"""BERT's sentence-pair examples (create_pretraining_data.py), one document at a time.

A document is a list of sentences (token id arrays). Sentences are gathered into a chunk
until it reaches the target length (max_num_tokens, or with short_seq_prob a length
drawn from [2, max_num_tokens], drawn afresh for every example: the reference draws it
once per document, which makes a long document all-short or all-long). Then:

  nsp   A = the chunk's first a_end sentences; B = the rest (label 0, "is next") or,
        with probability 1/2, a run of sentences from another document of the window
        (label 1, "random"); the chunk's unused sentences go back to the document.
  sop   A, B as above but always consecutive; swapped with probability 1/2 (label 1).
  none  one segment, no label (RoBERTa's full sentences, bounded by the document).

The label is decided first, then the pair is made to fit, so the balance is 1/2 in
expectation (the reference forces "random" whenever a chunk holds a single sentence,
which skews it toward random on short documents): a chunk of one sentence is split at a
random token instead. A pair too long is trimmed one token at a time from the longer
side, at its front or back at random. Returns (A, B or None, label or -1).
"""

from __future__ import annotations

import numpy as np

Pair = tuple[np.ndarray, np.ndarray | None, int]


def document_pairs(document: list[np.ndarray], others: list[list[np.ndarray]], task: str,
                   max_num_tokens: int, short_seq_prob: float,
                   rng: np.random.Generator) -> list[Pair]:
    pairs: list[Pair] = []
    target = _target_length(max_num_tokens, short_seq_prob, rng)
    chunk: list[np.ndarray] = []
    length, i = 0, 0
    while i < len(document):
        chunk.append(document[i])
        length += len(document[i])
        if i == len(document) - 1 or length >= target:
            if task == "none":
                tokens = np.concatenate(chunk)[:max_num_tokens]
                pairs.append((tokens, None, -1))
            else:
                pair, unused = _pair(chunk, others, task, target, max_num_tokens, rng)
                i -= unused
                if pair is not None:
                    pairs.append(pair)
            chunk, length = [], 0
            target = _target_length(max_num_tokens, short_seq_prob, rng)
        i += 1
    return pairs


def _target_length(max_num_tokens: int, short_seq_prob: float, rng: np.random.Generator) -> int:
    if rng.random() < short_seq_prob:
        return int(rng.integers(2, max_num_tokens + 1))
    return max_num_tokens


def _pair(chunk: list[np.ndarray], others: list[list[np.ndarray]], task: str, target: int,
          max_num_tokens: int, rng: np.random.Generator) -> tuple[Pair | None, int]:
    """(the pair or None, how many of the chunk's sentences go back to the document)."""
    label = int(rng.random() < 0.5)
    if task == "nsp" and label == 1 and not others:
        label = 0  # no other document in the window to draw from
    num_sentences = len(chunk)
    if num_sentences == 1:
        if len(chunk[0]) < 2 and not (task == "nsp" and label == 1):
            return None, 0
        cut = int(rng.integers(1, len(chunk[0]))) if len(chunk[0]) >= 2 else 1
        chunk = [chunk[0][:cut], chunk[0][cut:]]
    a_end = int(rng.integers(1, len(chunk))) if len(chunk) >= 2 else 1
    tokens_a = np.concatenate(chunk[:a_end])
    unused = 0
    if task == "nsp" and label == 1:
        other = others[int(rng.integers(len(others)))]
        start = int(rng.integers(len(other)))
        pieces, b_length = [], 0
        for sentence in other[start:]:
            pieces.append(sentence)
            b_length += len(sentence)
            if b_length >= target - len(tokens_a):
                break
        tokens_b = np.concatenate(pieces)
        unused = num_sentences - a_end if num_sentences > 1 else 0
    else:
        tokens_b = np.concatenate(chunk[a_end:])
        if task == "sop" and label == 1:
            tokens_a, tokens_b = tokens_b, tokens_a
    tokens_a, tokens_b = _truncate_pair(tokens_a, tokens_b, max_num_tokens, rng)
    if len(tokens_a) == 0 or len(tokens_b) == 0:
        return None, unused
    return (tokens_a, tokens_b, label), unused


def _truncate_pair(a: np.ndarray, b: np.ndarray, max_num_tokens: int,
                   rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    bounds = [[0, len(a)], [0, len(b)]]
    while (bounds[0][1] - bounds[0][0]) + (bounds[1][1] - bounds[1][0]) > max_num_tokens:
        longer = 0 if bounds[0][1] - bounds[0][0] > bounds[1][1] - bounds[1][0] else 1
        if rng.random() < 0.5:
            bounds[longer][0] += 1
        else:
            bounds[longer][1] -= 1
    return a[bounds[0][0]:bounds[0][1]], b[bounds[1][0]:bounds[1][1]]
