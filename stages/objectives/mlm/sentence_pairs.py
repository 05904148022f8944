"""BERT's sentence-pair examples (create_pretraining_data.py) for a window of documents.

The window's documents are sentences of token ids laid back to back in one array
(`SentenceWindow`), so that every segment of an example is a slice of it: the pairing
decides slices (a Python loop per example over plain ints, with every random number
drawn up front in one call), and the examples are assembled and masked as whole arrays.

In a document, sentences are gathered into a chunk until it reaches the target length
(max_num_tokens, or with short_seq_prob a length drawn from [2, max_num_tokens], drawn
afresh for every example: the reference draws it once per document, which makes a long
document all-short or all-long). Then:

  nsp   A = the chunk's first a_end sentences; B = the rest (label 0, "is next") or,
        with probability 1/2, a run of sentences from another document of the window
        (label 1, "random"); the chunk's unused sentences go back to the document.
  sop   A, B as above but always consecutive; swapped with probability 1/2 (label 1).
  none  one segment, no label (RoBERTa's full sentences, bounded by the document).

The label is decided first, then the pair is made to fit, so the balance is 1/2 in
expectation (the reference forces "random" whenever a chunk holds a single sentence,
which skews it toward random on short documents): a chunk of one sentence is split at a
random token instead. A pair too long is trimmed from the longer side one token at a
time, each at its front or back at random (`truncate_pairs`: the same lengths as the
reference's loop, the front/back split drawn as a binomial).
"""

from __future__ import annotations

import itertools
from bisect import bisect_left
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class SentenceWindow:
    """Documents as sentences of token ids, flattened. No sentence and no document is
    empty (`from_encodings` drops them)."""
    tokens: np.ndarray           # (num_tokens,) int64, every sentence back to back
    sentence_starts: np.ndarray  # (num_sentences + 1,) offsets into tokens
    document_starts: np.ndarray  # (num_documents + 1,) offsets into sentences

    @classmethod
    def from_encodings(cls, sentence_ids: list[list[int]],
                       sentences_per_document: list[int]) -> SentenceWindow:
        lengths = np.fromiter(map(len, sentence_ids), dtype=np.int64, count=len(sentence_ids))
        total = int(lengths.sum())
        tokens = np.fromiter(itertools.chain.from_iterable(sentence_ids), dtype=np.int64,
                             count=total)
        kept = lengths > 0
        document_of = np.repeat(np.arange(len(sentences_per_document)), sentences_per_document)
        per_document = np.bincount(document_of[kept], minlength=len(sentences_per_document))
        per_document = per_document[per_document > 0]
        return cls(tokens, np.concatenate([[0], np.cumsum(lengths[kept])]),
                   np.concatenate([[0], np.cumsum(per_document)]))

    @property
    def num_documents(self) -> int:
        return len(self.document_starts) - 1


@dataclass(frozen=True)
class PairSpans:
    """Examples as slices of a window's tokens: A = tokens[a_start:a_stop], B likewise
    (empty for task none); label 0/1, or -1 without a sentence task."""
    a_start: np.ndarray
    a_stop: np.ndarray
    b_start: np.ndarray
    b_stop: np.ndarray
    label: np.ndarray

    def __len__(self) -> int:
        return len(self.label)

    @classmethod
    def concatenate(cls, parts: list[PairSpans]) -> PairSpans:
        return cls(*(np.concatenate([getattr(p, name) for p in parts]).astype(np.int64)
                     for name in ("a_start", "a_stop", "b_start", "b_stop", "label")))


def window_pairs(window: SentenceWindow, task: str, max_num_tokens: int,
                 short_seq_prob: float, rng: np.random.Generator) -> PairSpans:
    """Every document's pairs, in document order, trimmed to max_num_tokens."""
    num_sentences = len(window.sentence_starts) - 1
    # A chunk starts at a sentence and the next one starts at a later sentence, so the
    # window has at most num_sentences chunks: one row of draws each.
    short, length, label, cut, other, start = rng.random((6, num_sentences))
    targets = np.where(short < short_seq_prob,
                       2 + (length * (max_num_tokens - 1)).astype(np.int64), max_num_tokens)
    spans = _pair_slices(window, task, max_num_tokens, targets.tolist(),
                         (label < 0.5).tolist(), cut.tolist(), other.tolist(), start.tolist())
    if task == "none":
        return spans
    return truncate_pairs(spans, max_num_tokens, rng)


def _pair_slices(window: SentenceWindow, task: str, max_num_tokens: int, targets: list[int],
                 labels: list[bool], cuts: list[float], others: list[float],
                 starts_of_b: list[float]) -> PairSpans:
    starts = window.sentence_starts.tolist()
    documents = window.document_starts.tolist()
    num_documents = len(documents) - 1
    pairs: list[tuple[int, int, int, int, int]] = []  # a_start, a_stop, b_start, b_stop, label
    add = pairs.append
    chunk = 0
    for document in range(num_documents):
        i, end = documents[document], documents[document + 1]
        while i < end:
            target, k = targets[chunk], chunk
            chunk += 1
            # the chunk is sentences [i, stop): the fewest that reach the target
            stop = bisect_left(starts, starts[i] + target, i + 1, end)
            if task == "none":
                add((starts[i], min(starts[stop], starts[i] + max_num_tokens), 0, 0, -1))
                i = stop
                continue
            label = int(labels[k])
            if task == "nsp" and label == 1 and num_documents < 2:
                label = 0  # no other document in the window to draw from
            random_b = task == "nsp" and label == 1
            next_i = stop
            if stop - i == 1:  # one sentence: split it at a random token
                length = starts[stop] - starts[i]
                if length < 2 and not random_b:
                    i = stop
                    continue
                split = starts[i] + (1 + int(cuts[k] * (length - 1)) if length >= 2 else 1)
            else:
                a_end = i + 1 + int(cuts[k] * (stop - i - 1))
                split = starts[a_end]
                if random_b:
                    next_i = a_end  # B's own sentences go back to the document
            if random_b:
                picked = int(others[k] * (num_documents - 1))
                picked += picked >= document
                first, last = documents[picked], documents[picked + 1]
                b_first = first + int(starts_of_b[k] * (last - first))
                b_stop = bisect_left(starts, starts[b_first] + target - (split - starts[i]),
                                     b_first + 1, last)
                add((starts[i], split, starts[b_first], starts[b_stop], 1))
            elif task == "sop" and label == 1:
                add((split, starts[stop], starts[i], split, 1))
            else:
                add((starts[i], split, split, starts[stop], 0))
            i = next_i
    return PairSpans(*np.array(pairs, dtype=np.int64).reshape(-1, 5).T)


def truncate_pairs(spans: PairSpans, max_num_tokens: int,
                   rng: np.random.Generator) -> PairSpans:
    """Trim pairs longer than max_num_tokens as the reference does, one token at a time
    from the longer side (B on a tie), each from its front or back at random; drop a pair
    left with an empty side."""
    length_a, length_b = spans.a_stop - spans.a_start, spans.b_stop - spans.b_start
    excess = np.maximum(length_a + length_b - max_num_tokens, 0)
    # first the longer side down to the shorter one, then alternately B and A
    evening = np.minimum(excess, np.abs(length_a - length_b))
    rest = excess - evening
    trim_a = np.where(length_a > length_b, evening, 0) + rest // 2
    trim_b = np.where(length_a > length_b, 0, evening) + rest - rest // 2
    front_a, front_b = rng.binomial(trim_a, 0.5), rng.binomial(trim_b, 0.5)
    trimmed = PairSpans(spans.a_start + front_a, spans.a_stop - (trim_a - front_a),
                        spans.b_start + front_b, spans.b_stop - (trim_b - front_b), spans.label)
    keep = (trimmed.a_stop > trimmed.a_start) & (trimmed.b_stop > trimmed.b_start)
    if keep.all():
        return trimmed
    return PairSpans(*(getattr(trimmed, name)[keep]
                       for name in ("a_start", "a_stop", "b_start", "b_stop", "label")))
