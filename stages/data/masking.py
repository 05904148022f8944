"""BERT masking, numpy only: shared by the dataset stage (static masks, stored) and the
loader (dynamic masks, drawn per epoch), so both follow exactly the same rule.

Per example: of the maskable positions (not [CLS]/[SEP]/[PAD] or any other special
token), round(mask_prob * count) are chosen (at least one), uniformly at random, or by
whole words when `word_start` is given (a word = its first token and the continuation
pieces after it; words are taken in random order until the count is reached, skipping a
word that would overshoot it, as BERT's create_pretraining_data.py does). A chosen token
becomes [MASK] with mask_token_prob, a random non-special token with random_token_prob,
and stays itself otherwise. The label is the original token at chosen positions and
IGNORE_INDEX elsewhere.

`mask_rows` does a whole (examples, seq_len) batch at once with array operations (no
Python loop per token or per example: the build masks millions of examples);
`mask_examples` too, with one generator per example (the loader); `mask` is one example.
The rule itself is the same array code on every path; only where its random numbers
come from differs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

IGNORE_INDEX = -100  # what torch's cross_entropy skips
_NEVER = 2.0  # a sort key above every uniform draw: sorts unusable slots last


@dataclass(frozen=True)
class MaskingPolicy:
    mask_id: int
    special_ids: np.ndarray       # ids never chosen and never drawn as random tokens
    vocab_size: int
    mask_prob: float = 0.15
    mask_token_prob: float = 0.8
    random_token_prob: float = 0.1
    word_start: np.ndarray | None = None  # bool per vocabulary id: begins a word (wwm)

    def __post_init__(self):
        is_special = np.zeros(self.vocab_size, dtype=bool)
        is_special[self.special_ids] = True
        object.__setattr__(self, "_is_special", is_special)
        object.__setattr__(self, "_random_pool", np.flatnonzero(~is_special))

    def mask(self, input_ids: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """(masked ids, labels) of one example (1-D ids, padding included)."""
        masked, labels = self.mask_rows(input_ids[None, :], rng)
        return masked[0], labels[0]

    def mask_rows(self, input_ids: np.ndarray, rng: np.random.Generator
                  ) -> tuple[np.ndarray, np.ndarray]:
        """(masked ids, labels), both int64 (examples, seq_len), of a batch of examples,
        every random number drawn from `rng`: a key per position, then an action (and a
        random token) per chosen position only."""
        def draw_for_chosen(chosen: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            num_chosen = int(np.count_nonzero(chosen))
            return (rng.random(num_chosen),
                    rng.integers(len(self._random_pool), size=num_chosen))

        return self._apply(input_ids, rng.random(input_ids.shape), draw_for_chosen)

    def mask_examples(self, input_ids: np.ndarray, rngs: list[np.random.Generator]
                      ) -> tuple[np.ndarray, np.ndarray]:
        """As mask_rows, but row i draws from rngs[i] alone, so that its masks depend on
        its own generator only, not on the rows batched with it (the loader's dynamic
        masks: a function of (seed, epoch, example index)). Each row draws a key, an
        action and a random token for every position, so that the draws do not depend on
        what the other rows chose."""
        if not rngs:  # a rank's share of the epoch's last, partial batch may be empty
            return self.mask_rows(input_ids, np.random.default_rng(0))
        seq_len = input_ids.shape[1]
        draws = [(rng.random(seq_len), rng.random(seq_len),
                  rng.integers(len(self._random_pool), size=seq_len)) for rng in rngs]
        keys, actions, random_ids = (np.stack(column) for column in zip(*draws))
        return self._apply(input_ids, keys,
                           lambda chosen: (actions[chosen], random_ids[chosen]))

    def _apply(self, input_ids: np.ndarray, keys: np.ndarray,
               draw_for_chosen: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]
               ) -> tuple[np.ndarray, np.ndarray]:
        """The rule, given a key per position and, for the chosen positions (a bool
        (rows, seq_len) mask, in row-major order), an action draw and a random-token
        draw each."""
        input_ids = np.asarray(input_ids, dtype=np.int64)
        maskable = ~self._is_special[input_ids]
        counts = maskable.sum(axis=1)
        # np.rint rounds half to even, as Python's round() in the reference does
        num_to_mask = np.where(counts > 0, np.maximum(1, np.rint(counts * self.mask_prob)), 0)
        num_to_mask = num_to_mask.astype(np.int64)
        chosen = (self._choose_words(input_ids, maskable, num_to_mask, keys)
                  if self.word_start is not None else
                  _choose_uniform(maskable, num_to_mask, keys))
        positions = np.flatnonzero(chosen)                   # row-major, as chosen[...] is
        actions, random_ids = draw_for_chosen(chosen)
        labels = np.full(input_ids.shape, IGNORE_INDEX, dtype=np.int64)
        labels.flat[positions] = input_ids.flat[positions]
        masked = input_ids.copy()
        to_mask = actions < self.mask_token_prob
        to_random = ~to_mask & (actions < self.mask_token_prob + self.random_token_prob)
        masked.flat[positions[to_mask]] = self.mask_id
        masked.flat[positions[to_random]] = self._random_pool[random_ids[to_random]]
        return masked, labels

    def _choose_words(self, input_ids: np.ndarray, maskable: np.ndarray,
                      num_to_mask: np.ndarray, keys: np.ndarray) -> np.ndarray:
        num_rows, seq_len = input_ids.shape
        # A maskable token starts a word if the vocabulary says so or if the token before
        # it is not maskable (the first piece after [CLS]/[SEP] always starts a word).
        after_unmaskable = np.ones_like(maskable)
        after_unmaskable[:, 1:] = ~maskable[:, :-1]
        starts = maskable & (self.word_start[input_ids] | after_unmaskable)
        word_of = np.cumsum(starts, axis=1) - 1                      # (rows, seq_len)
        num_words = starts.sum(axis=1)
        flat_word = np.arange(num_rows)[:, None] * seq_len + np.maximum(word_of, 0)
        word_lengths = np.bincount(flat_word[maskable], minlength=num_rows * seq_len
                                   ).reshape(num_rows, seq_len)      # (rows, word slot)
        # Words in random order; then BERT's greedy pass over that order, one word rank
        # at a time for every row together.
        keys = np.where(np.arange(seq_len)[None, :] < num_words[:, None], keys, _NEVER)
        order = np.argsort(keys, axis=1)
        lengths_in_order = np.take_along_axis(word_lengths, order, axis=1)
        taken_in_order = np.zeros((num_rows, seq_len), dtype=bool)
        total = np.zeros(num_rows, dtype=np.int64)
        for rank in range(int(num_words.max(initial=0))):
            length = lengths_in_order[:, rank]
            take = (length > 0) & (total + length <= num_to_mask)
            taken_in_order[:, rank] = take
            total += np.where(take, length, 0)
        word_taken = np.zeros_like(taken_in_order)
        np.put_along_axis(word_taken, order, taken_in_order, axis=1)
        return maskable & np.take_along_axis(word_taken, np.maximum(word_of, 0), axis=1)


def _choose_uniform(maskable: np.ndarray, num_to_mask: np.ndarray,
                    keys: np.ndarray) -> np.ndarray:
    """num_to_mask[r] maskable positions of each row r, uniformly without replacement:
    the positions with the smallest random keys, i.e. those at or below the row's
    num_to_mask-th smallest key (float64 keys: a tie there is a 2**-53 event)."""
    keys = np.where(maskable, keys, _NEVER)
    kth = np.sort(keys, axis=1)[np.arange(len(keys)), np.maximum(num_to_mask - 1, 0)]
    return (keys <= kth[:, None]) & (num_to_mask[:, None] > 0)


def word_start_table(vocabulary: dict[str, int]) -> np.ndarray:
    """Bool per id: whether the token can begin a word, read from the model's markers:
    WordPiece continues words with '##'; Unigram/SentencePiece ('▁') and byte-level BPE
    ('Ġ') mark word starts. Without any marker every token is its own word."""
    table = np.ones(max(vocabulary.values()) + 1, dtype=bool)
    tokens = list(vocabulary)
    if any(token.startswith("##") for token in tokens):
        for token, token_id in vocabulary.items():
            table[token_id] = not token.startswith("##")
        return table
    for marker in ("▁", "Ġ"):
        if any(token.startswith(marker) for token in tokens):
            for token, token_id in vocabulary.items():
                table[token_id] = token.startswith(marker)
            return table
    return table
