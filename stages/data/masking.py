"""BERT masking, numpy only: shared by the dataset stage (static masks, stored) and the
loader (dynamic masks, drawn per epoch), so both follow exactly the same rule.

Per example: of the maskable positions (not [CLS]/[SEP]/[PAD] or any other special
token), round(mask_prob * count) are chosen (at least one), uniformly at random, or by
whole words when `word_start` is given (a word = its first token and the continuation
pieces after it; words are taken in random order until the count is reached, as BERT's
create_pretraining_data.py does). A chosen token becomes [MASK] with mask_token_prob,
a random non-special token with random_token_prob, and stays itself otherwise. The
label is the original token at chosen positions and IGNORE_INDEX elsewhere.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

IGNORE_INDEX = -100  # what torch's cross_entropy skips


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
        maskable = ~self._is_special[input_ids]
        positions = np.flatnonzero(maskable)
        labels = np.full(len(input_ids), IGNORE_INDEX, dtype=np.int64)
        masked = input_ids.copy()
        if len(positions) == 0:
            return masked, labels
        num_to_mask = max(1, int(round(len(positions) * self.mask_prob)))
        chosen = (self._choose_words(input_ids, positions, num_to_mask, rng)
                  if self.word_start is not None else
                  np.sort(rng.choice(positions, num_to_mask, replace=False)))
        labels[chosen] = input_ids[chosen]
        action = rng.random(len(chosen))
        to_mask = chosen[action < self.mask_token_prob]
        to_random = chosen[(action >= self.mask_token_prob)
                           & (action < self.mask_token_prob + self.random_token_prob)]
        masked[to_mask] = self.mask_id
        masked[to_random] = rng.choice(self._random_pool, len(to_random))
        return masked, labels

    def _choose_words(self, input_ids: np.ndarray, positions: np.ndarray, num_to_mask: int,
                      rng: np.random.Generator) -> np.ndarray:
        # A maskable token starts a word if the vocabulary says so or if the token before
        # it is not maskable (the first piece after [CLS]/[SEP] always starts a word).
        starts = self.word_start[input_ids[positions]].copy()
        starts[0] = True
        starts[1:] |= np.diff(positions) > 1
        word_of = np.cumsum(starts) - 1
        num_words = int(word_of[-1]) + 1
        word_lengths = np.bincount(word_of, minlength=num_words)
        chosen_words, total = [], 0
        for word in rng.permutation(num_words):
            if total >= num_to_mask:
                break
            if total + word_lengths[word] > num_to_mask:
                continue  # BERT skips a word that would overshoot the count
            chosen_words.append(word)
            total += word_lengths[word]
        return positions[np.isin(word_of, chosen_words)]


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
