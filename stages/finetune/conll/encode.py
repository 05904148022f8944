"""Words -> fixed-length token arrays with one label per word, on its first subword.

Continuation subwords, special tokens and padding get -100 (no loss, no prediction).
`first_tokens[i][w]` is the position of word w's first subword in row i, or -1 when
truncation cut the word off (it is then predicted "O").
"""

from __future__ import annotations

import numpy as np
from tokenizers import Tokenizer

from stages.finetune.conll.reader import ConllSentences
from stages.finetune.encode import EncodedSplit, is_bert_tokenizer

IGNORE = -100


def encode_sentences(tokenizer: Tokenizer, sentences: ConllSentences, labels: tuple[str, ...],
                     ) -> tuple[EncodedSplit, list[list[int]]]:
    label_ids = {label: i for i, label in enumerate(labels)}
    encodings = tokenizer.encode_batch(sentences.words, is_pretokenized=True)
    rows, first_tokens = [], []
    for encoding, tags in zip(encodings, sentences.tags):
        row = np.full(len(encoding.ids), IGNORE, dtype=np.int64)
        firsts = [-1] * len(tags)
        previous = None
        for position, word in enumerate(encoding.word_ids):
            if word is not None and word != previous:
                row[position] = label_ids[tags[word]]
                firsts[word] = position
            previous = word
        rows.append(row)
        first_tokens.append(firsts)
    split = EncodedSplit(
        input_ids=np.asarray([e.ids for e in encodings], dtype=np.int32),
        attention_mask=np.asarray([e.attention_mask for e in encodings], dtype=np.int8),
        labels=np.stack(rows),
        token_type_ids=(np.asarray([e.type_ids for e in encodings], dtype=np.int8)
                        if is_bert_tokenizer(tokenizer) else None))
    return split, first_tokens


def word_predictions(logits: np.ndarray, first_tokens: list[list[int]], labels: tuple[str, ...]) -> list[list[str]]:
    """logits (N, T, num_labels) -> a tag per word; words cut off by truncation get "O"."""
    best = logits.argmax(axis=-1)  # (N, T)
    return [[labels[best[i, p]] if p >= 0 else "O" for p in firsts] for i, firsts in enumerate(first_tokens)]
