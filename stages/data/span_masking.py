"""SpanBERT's masking (Joshi et al. 2020), numpy only: contiguous spans of whole words
instead of single tokens or scattered words. Shared, like masking.py, by the dataset
stage (static masks, stored: `mask_rows`) and the loader (dynamic masks drawn per epoch:
`mask_examples`, one generator per example; stages/objectives/mlm/batch.py).

Per example, with the same budget as BERT's masking (round(mask_prob * maskable tokens),
at least one):
  1. draw a span length in words from a geometric distribution with parameter
     `geometric_p`, truncated at `max_span_words` and renormalized (SpanBERT's
     `len_distrib`: p = 0.2 and 10 words give a mean of 3.79);
  2. draw the span's first word uniformly among the words where a span of that length
     fits: inside one segment (A or B, never across [SEP]) and clear of the spans already
     taken, so that spans stay disjoint and keep the length that was drawn; when none
     fits, draw the length again;
  3. take the span's words until the budget is reached: only the last span of an example
     can end early (`num_words < drawn_words`), and never inside a word.
Then each span as a whole (not each token) becomes [MASK] with mask_token_prob, random
tokens (one per position) with random_token_prob, and stays itself otherwise.

Words are whole-word masking's (stages/data/masking.py): a token begins a word if the
vocabulary says so (`word_start`) or if the token before it cannot be masked.

The rule loops in Python per span (a handful per example); token and whole-word masking
keep their array code in MaskingPolicy, untouched.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from stages.data.masking import IGNORE_INDEX


class MaskedSpan(NamedTuple):
    start: int          # first token position
    stop: int           # one past the last token position
    num_words: int      # words masked
    drawn_words: int    # the length drawn; larger than num_words only if the budget cut it
    action: str         # "mask" | "random" | "keep"


def span_length_probabilities(geometric_p: float, max_span_words: int) -> np.ndarray:
    """P(length = 1..max_span_words): geometric, truncated and renormalized."""
    lengths = np.arange(1, max_span_words + 1)
    probabilities = geometric_p * (1 - geometric_p) ** (lengths - 1)
    return probabilities / probabilities.sum()


@dataclass(frozen=True)
class SpanMaskingPolicy:
    mask_id: int
    special_ids: np.ndarray       # ids never masked and never drawn as random tokens
    vocab_size: int
    word_start: np.ndarray        # bool per vocabulary id: begins a word
    mask_prob: float = 0.15
    mask_token_prob: float = 0.8
    random_token_prob: float = 0.1
    geometric_p: float = 0.2
    max_span_words: int = 10

    def __post_init__(self):
        is_special = np.zeros(self.vocab_size, dtype=bool)
        is_special[self.special_ids] = True
        object.__setattr__(self, "_is_special", is_special)
        object.__setattr__(self, "_random_pool", np.flatnonzero(~is_special))
        object.__setattr__(self, "_length_cdf", np.cumsum(
            span_length_probabilities(self.geometric_p, self.max_span_words)))

    def mask_rows(self, input_ids: np.ndarray, rng: np.random.Generator
                  ) -> tuple[np.ndarray, np.ndarray]:
        """(masked ids, labels), int64 (examples, seq_len), every draw from `rng`."""
        masked, labels, _ = self.mask_rows_with_spans(input_ids, [rng] * len(input_ids))
        return masked, labels

    def mask_examples(self, input_ids: np.ndarray, rngs: list[np.random.Generator]
                      ) -> tuple[np.ndarray, np.ndarray]:
        """As mask_rows, row i drawing from rngs[i] alone (MaskingPolicy's interface for
        the loader's dynamic masks)."""
        masked, labels, _ = self.mask_rows_with_spans(input_ids, rngs)
        return masked, labels

    def mask_rows_with_spans(self, input_ids: np.ndarray, rngs: list[np.random.Generator]
                             ) -> tuple[np.ndarray, np.ndarray, list[list[MaskedSpan]]]:
        """(masked ids, labels, the spans of each row); row i draws from rngs[i]."""
        input_ids = np.asarray(input_ids, dtype=np.int64)
        masked = input_ids.copy()
        labels = np.full(input_ids.shape, IGNORE_INDEX, dtype=np.int64)
        spans_of_rows = []
        for row, rng in enumerate(rngs):
            spans = self._mask_row(input_ids[row], masked[row], labels[row], rng)
            spans_of_rows.append(spans)
        return masked, labels, spans_of_rows

    def _mask_row(self, ids: np.ndarray, masked: np.ndarray, labels: np.ndarray,
                  rng: np.random.Generator) -> list[MaskedSpan]:
        word_starts, word_stops, segment_of_word = self._words(ids)
        num_words = len(word_starts)
        if num_words == 0:
            return []
        num_maskable = int((word_stops - word_starts).sum())
        # np.rint rounds half to even, as MaskingPolicy (and BERT's round()) does
        budget = max(1, int(np.rint(num_maskable * self.mask_prob)))
        taken = np.zeros(num_words, dtype=bool)
        total = 0
        chosen: list[tuple[int, int, int]] = []   # (first word, words taken, words drawn)
        while total < budget and not taken.all():
            drawn = int(np.searchsorted(self._length_cdf, rng.random(), side="right")) + 1
            drawn = min(drawn, self.max_span_words)  # guards a cdf that sums to 1 - 1e-16
            anchors = self._fitting_anchors(drawn, taken, segment_of_word)
            if len(anchors) == 0:
                continue  # no room for this length: draw another
            first = int(anchors[rng.integers(len(anchors))])
            words = 0
            while words < drawn and total < budget:
                word = first + words
                taken[word] = True
                total += int(word_stops[word] - word_starts[word])
                words += 1
            chosen.append((first, words, drawn))
        spans = []
        for first, words, drawn in chosen:
            start, stop = int(word_starts[first]), int(word_stops[first + words - 1])
            labels[start:stop] = ids[start:stop]
            action = rng.random()
            if action < self.mask_token_prob:
                masked[start:stop], kind = self.mask_id, "mask"
            elif action < self.mask_token_prob + self.random_token_prob:
                masked[start:stop] = self._random_pool[
                    rng.integers(len(self._random_pool), size=stop - start)]
                kind = "random"
            else:
                kind = "keep"
            spans.append(MaskedSpan(start, stop, words, drawn, kind))
        return spans

    def _words(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(start, stop, segment) per word of one example, in order."""
        maskable = ~self._is_special[ids]
        after_unmaskable = np.ones_like(maskable)
        after_unmaskable[1:] = ~maskable[:-1]
        starts = maskable & (self.word_start[ids] | after_unmaskable)
        word_starts = np.flatnonzero(starts)
        # a word ends where the next word starts or an unmaskable token comes
        boundaries = np.flatnonzero(starts | ~maskable)
        next_boundary = np.searchsorted(boundaries, word_starts, side="right")
        word_stops = np.append(boundaries, len(ids))[next_boundary]
        segment_of_word = np.cumsum(~maskable)[word_starts]
        return word_starts, word_stops, segment_of_word

    @staticmethod
    def _fitting_anchors(length: int, taken: np.ndarray,
                         segment_of_word: np.ndarray) -> np.ndarray:
        """First words of the spans of `length` words that lie in one segment and touch
        no taken word."""
        num_anchors = len(taken) - length + 1
        if num_anchors <= 0:
            return np.empty(0, dtype=np.int64)
        taken_before = np.concatenate([[0], np.cumsum(taken)])
        clear = taken_before[length:] - taken_before[:num_anchors] == 0
        one_segment = segment_of_word[length - 1:] == segment_of_word[:num_anchors]
        return np.flatnonzero(clear & one_segment)
