"""Text -> fixed-length token arrays for a task, with the pretrained tokenizer.

Every example becomes exactly `max_seq_len` ids (truncated, then right-padded with the
pad token) and an attention mask (1 = real token). The sequence ends with an end-of-text
token because a decoder's classification head reads the last real position: a fixed
final token gives it the same job for every input. Sentence pairs become
`A <eos> B <eos>`, so the model can tell where one sentence stops.

A BERT tokenizer (one that has [CLS], [SEP] and [PAD], e.g. an imported Hugging Face
folder's tokenizer.json) gets BERT's layout instead: `[CLS] A [SEP] B [SEP]` with token
type ids 0 for A and 1 for B. `PairLayout` describes either, for code that assembles
sequences itself (SQuAD windows).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer, processors

END_OF_TEXT = "<|endoftext|>"
PAD = "<|pad|>"
BERT_SPECIALS = ("[CLS]", "[SEP]", "[PAD]")
T5_SPECIALS = ("<pad>", "</s>")


@dataclass(frozen=True)
class PairLayout:
    """How a (question, context) pair is put together: prefix A sep B sep, then pads."""

    prefix_ids: tuple[int, ...]  # BERT: ([CLS],); GPT: ()
    sep_id: int  # BERT: [SEP]; GPT: <|endoftext|>
    pad_id: int
    uses_segments: bool  # BERT: token type ids 0 / 1; GPT: none


def is_bert_tokenizer(tokenizer: Tokenizer) -> bool:
    return all(tokenizer.token_to_id(token) is not None for token in BERT_SPECIALS)


def pair_layout(tokenizer: Tokenizer) -> PairLayout:
    if is_bert_tokenizer(tokenizer):
        cls, sep, pad = (tokenizer.token_to_id(t) for t in BERT_SPECIALS)
        return PairLayout(prefix_ids=(cls,), sep_id=sep, pad_id=pad, uses_segments=True)
    return PairLayout(prefix_ids=(), sep_id=tokenizer.token_to_id(END_OF_TEXT),
                      pad_id=tokenizer.token_to_id(PAD), uses_segments=False)


@dataclass
class EncodedSplit:
    input_ids: np.ndarray  # (N, T) int32
    attention_mask: np.ndarray  # (N, T) int8, 1 for real tokens
    labels: np.ndarray | None  # (N,) int64 class ids or float32 scores; None for test
    # (N, T) int8 segment ids for BERT; None for GPT. (Span tasks: labels (N, 2) start/end;
    # token tasks: labels (N, T), -100 = no label.)
    token_type_ids: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.input_ids)


def load_task_tokenizer(path: str | Path, max_seq_len: int) -> Tokenizer:
    """The pretraining tokenizer, set up to truncate, add the end token and pad; or a
    BERT tokenizer, set up to add [CLS]/[SEP], truncate and pad."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: tokenizer not found; the pretrain stage writes it as model/tokenizer.json")
    tokenizer = Tokenizer.from_file(str(path))
    if is_bert_tokenizer(tokenizer):
        return _setup_bert(tokenizer, max_seq_len)
    if all(tokenizer.token_to_id(token) is not None for token in T5_SPECIALS):
        # T5 (stages.finetune.text_to_text): its own post-processor already ends
        # every sequence with </s>; truncation keeps it.
        tokenizer.enable_truncation(max_length=max_seq_len)
        tokenizer.enable_padding(pad_id=tokenizer.token_to_id("<pad>"), pad_token="<pad>", length=max_seq_len)
        return tokenizer
    ids = {token: tokenizer.token_to_id(token) for token in (END_OF_TEXT, PAD)}
    missing = [token for token, i in ids.items() if i is None]
    if missing:
        raise ValueError(
            f"{path}: tokenizer has no special token(s) {missing}; retrain it with "
            f"special tokens {END_OF_TEXT!r} and {PAD!r} (the tokenizer stage adds both)"
        )
    template = processors.TemplateProcessing(
        single=f"$A {END_OF_TEXT}",
        pair=f"$A {END_OF_TEXT} $B {END_OF_TEXT}",
        special_tokens=[(END_OF_TEXT, ids[END_OF_TEXT])],
    )
    # Keep the tokenizer's own post-processor (byte-level offset trimming) and add the
    # template after it, unless it already adds special tokens of its own.
    existing = tokenizer.post_processor
    if existing is None:
        tokenizer.post_processor = template
    elif existing.num_special_tokens_to_add(is_pair=True) == 0:
        tokenizer.post_processor = processors.Sequence([existing, template])
    # Truncation counts the template's special tokens, so the end token always survives.
    tokenizer.enable_truncation(max_length=max_seq_len)
    tokenizer.enable_padding(pad_id=ids[PAD], pad_token=PAD, length=max_seq_len)
    return tokenizer


def _setup_bert(tokenizer: Tokenizer, max_seq_len: int) -> Tokenizer:
    cls, sep, pad = (tokenizer.token_to_id(t) for t in BERT_SPECIALS)
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
    tokenizer.enable_truncation(max_length=max_seq_len)
    tokenizer.enable_padding(pad_id=pad, pad_token="[PAD]", length=max_seq_len)
    return tokenizer


def raw_tokenizer(tokenizer: Tokenizer) -> Tokenizer:
    """A copy that neither truncates nor pads (for code that cuts sequences itself)."""
    copy = Tokenizer.from_str(tokenizer.to_str())
    copy.no_truncation()
    copy.no_padding()
    return copy


def encode_texts(tokenizer: Tokenizer, texts: list[tuple[str, ...]], labels: np.ndarray | None) -> EncodedSplit:
    """texts: one tuple per example, (sentence,) or (sentence1, sentence2)."""
    batch = [t[0] if len(t) == 1 else (t[0], t[1]) for t in texts]
    encodings = tokenizer.encode_batch(batch)
    return EncodedSplit(
        input_ids=np.asarray([e.ids for e in encodings], dtype=np.int32),
        attention_mask=np.asarray([e.attention_mask for e in encodings], dtype=np.int8),
        labels=labels,
        token_type_ids=(np.asarray([e.type_ids for e in encodings], dtype=np.int8)
                        if is_bert_tokenizer(tokenizer) else None),
    )
