"""(source text, target text) pairs -> token arrays, and generated ids back to text.

Every text-to-text task (GLUE, STS-B, SQuAD, CoNLL-2003) goes through these two
functions; the task modules only decide what the texts say.

Sources are truncated/padded to the task tokenizer's max_seq_len (T5's post-processor
ends them with </s>, and truncation keeps it). Targets are the text's ids ending with
</s>, at most `max_target_len` of them (a longer target loses its end, not its </s>,
so that the model still learns to stop), -100 after: no loss on padding.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
from tokenizers import Tokenizer

from stages.data.masking import IGNORE_INDEX
from stages.finetune.encode import EncodedSplit, raw_tokenizer
EOS = "</s>"


def encode_pairs(tokenizer: Tokenizer, sources: list[str], targets: list[str] | None,
                 max_target_len: int) -> EncodedSplit:
    """tokenizer: from `load_task_tokenizer` (truncates and pads sources)."""
    encoded = tokenizer.encode_batch(sources)
    labels = None if targets is None else target_ids(tokenizer, targets, max_target_len)
    return EncodedSplit(input_ids=np.asarray([e.ids for e in encoded], dtype=np.int32),
                        attention_mask=np.asarray([e.attention_mask for e in encoded], dtype=np.int8),
                        labels=labels)


def target_ids(tokenizer: Tokenizer, targets: list[str], max_target_len: int) -> np.ndarray:
    """Targets (N, max_target_len): each text's ids ending with </s>, IGNORE_INDEX after."""
    eos = tokenizer.token_to_id(EOS)
    labels = np.full((len(targets), max_target_len), IGNORE_INDEX, dtype=np.int64)
    for row, encoding in enumerate(raw_tokenizer(tokenizer).encode_batch(targets)):
        ids = encoding.ids  # ends with </s> (the post-processor)
        if len(ids) > max_target_len:
            ids = ids[:max_target_len - 1] + [eos]
        labels[row, :len(ids)] = ids
    return labels


def generated_texts(tokenizer_path: str, outputs: np.ndarray) -> list[str]:
    """Generated ids (N, max_target_len), -1 after </s> (`TextToTextModel`) -> texts,
    special tokens dropped (</s>, and <unk> for characters the vocabulary lacks)."""
    rows = [[int(t) for t in row if t >= 0] for row in outputs]
    return [text.strip() for text in _tokenizer(tokenizer_path).decode_batch(rows, skip_special_tokens=True)]


@lru_cache(maxsize=4)
def _tokenizer(path: str) -> Tokenizer:
    return Tokenizer.from_file(path)
