"""Sequence-to-sequence rows -> token arrays, for an encoder-decoder or a decoder only.

    split, facts = encode_rows(tokenizer_path, spec, rows, layout="encoder_decoder", train=True)

encoder_decoder (T5, the original Transformer): input_ids = prefix + source + </s>, cut at
    spec.max_source_len; labels (training only) = target + </s>, at most
    spec.max_target_len ids, -100 after.
decoder_only (GPT): one sequence `source + separator + target + <|endoftext|>`, the
    source cut at max_source_len and the target at max_target_len; labels are the
    sequence's own ids on the target (and its end token) and -100 on the source, the
    separator and the padding, so the loss is on the target tokens only (GPT shifts
    labels inside). Prediction rows hold only `source + separator`.

Nothing is cut silently: `facts` counts the sources cut and the training targets cut
(spec.long_targets: error refuses them instead, naming the longest and the fix).
References are never cut: they are scored as text.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer

from stages.data.masking import IGNORE_INDEX
from stages.finetune.encode import END_OF_TEXT, PAD, EncodedSplit
from stages.finetune.seq2seq.reader import Seq2SeqDataError, Seq2SeqRows
from stages.finetune.seq2seq.spec import Seq2SeqSpec
LAYOUTS = ("encoder_decoder", "decoder_only")


@lru_cache(maxsize=4)
def plain_tokenizer(path: str) -> Tokenizer:
    """The pretraining tokenizer without truncation or padding (this module cuts itself);
    its post-processor still ends a T5 sequence with </s>."""
    tokenizer = Tokenizer.from_file(str(path))
    tokenizer.no_truncation()
    tokenizer.no_padding()
    return tokenizer


def special_ids(tokenizer: Tokenizer, layout: str) -> tuple[int, int]:
    """(end id, pad id) of the layout's tokenizer."""
    names = ("</s>", "<pad>") if layout == "encoder_decoder" else (END_OF_TEXT, PAD)
    ids = tuple(tokenizer.token_to_id(name) for name in names)
    if None in ids:
        raise ValueError(f"the tokenizer has no {' / '.join(names)}: a {layout.replace('_', '-')} model needs them "
                         "(retrain the tokenizer with the model family's recipe)")
    return ids


def encode_rows(tokenizer_path: str | Path, spec: Seq2SeqSpec, rows: Seq2SeqRows, *, layout: str,
                train: bool, where: str = "") -> tuple[EncodedSplit, dict[str, int]]:
    """rows -> (EncodedSplit, {"sources_cut", "targets_cut", "longest_target"}). `where`
    names the file for the long_targets: error message."""
    tokenizer = plain_tokenizer(str(tokenizer_path))
    end, pad = special_ids(tokenizer, layout)
    sources = [e.ids for e in tokenizer.encode_batch([spec.prefix + s for s in rows.sources])]
    targets = [e.ids for e in tokenizer.encode_batch(rows.targets)] if train else []
    if layout == "encoder_decoder":  # the T5 post-processor added </s> to each
        sources = [ids if ids and ids[-1] == end else ids + [end] for ids in sources]
        targets = [ids if ids and ids[-1] == end else ids + [end] for ids in targets]
    else:
        targets = [ids + [end] for ids in targets]
    facts = {"sources_cut": sum(len(ids) > spec.max_source_len for ids in sources)}
    if train:
        lengths = [len(ids) for ids in targets]
        too_long = [i for i, n in enumerate(lengths) if n > spec.max_target_len]
        if too_long and spec.long_targets == "error":
            longest = max(too_long, key=lambda i: lengths[i])
            raise Seq2SeqDataError(
                f"{where or spec.name}: {len(too_long)} training targets are longer than max_target_len="
                f"{spec.max_target_len} tokens (the longest, line {rows.line_numbers[longest]}, has "
                f"{lengths[longest]}). Raise max_target_len to {lengths[longest]} in the task's spec, or set "
                "long_targets: cut to train on their first max_target_len tokens (counted and reported)")
        facts.update(targets_cut=len(too_long), longest_target=max(lengths, default=0))
    if layout == "encoder_decoder":
        return _encoder_decoder(sources, targets if train else None, spec, end, pad), facts
    separator = tokenizer.encode(spec.separator).ids
    return _decoder_only(sources, targets if train else None, separator, spec, pad), facts


def _cut(ids: list[int], length: int, end: int | None) -> list[int]:
    """At most `length` ids; a cut sequence keeps its final `end` token (so a cut target
    still teaches the model to stop)."""
    if len(ids) <= length:
        return ids
    return ids[:length - 1] + [end] if end is not None else ids[:length]


def _encoder_decoder(sources, targets, spec: Seq2SeqSpec, end: int, pad: int) -> EncodedSplit:
    S = spec.max_source_len
    input_ids = np.full((len(sources), S), pad, dtype=np.int32)
    mask = np.zeros((len(sources), S), dtype=np.int8)
    for row, ids in enumerate(sources):
        ids = _cut(ids, S, end)
        input_ids[row, :len(ids)], mask[row, :len(ids)] = ids, 1
    labels = None
    if targets is not None:
        labels = np.full((len(targets), spec.max_target_len), IGNORE_INDEX, dtype=np.int64)
        for row, ids in enumerate(targets):
            ids = _cut(ids, spec.max_target_len, end)
            labels[row, :len(ids)] = ids
    return EncodedSplit(input_ids=input_ids, attention_mask=mask, labels=labels)


def _decoder_only(sources, targets, separator: list[int], spec: Seq2SeqSpec, pad: int) -> EncodedSplit:
    width = spec.max_source_len + len(separator) + (spec.max_target_len if targets is not None else 0)
    input_ids = np.full((len(sources), width), pad, dtype=np.int32)
    mask = np.zeros((len(sources), width), dtype=np.int8)
    labels = None if targets is None else np.full((len(sources), width), IGNORE_INDEX, dtype=np.int64)
    for row, source in enumerate(sources):
        prompt = _cut(source, spec.max_source_len, None) + separator
        ids = prompt
        if targets is not None:
            target = _cut(targets[row], spec.max_target_len, targets[row][-1])
            ids = prompt + target
            labels[row, len(prompt):len(ids)] = target  # loss on the target and its end token only
        input_ids[row, :len(ids)], mask[row, :len(ids)] = ids, 1
    return EncodedSplit(input_ids=input_ids, attention_mask=mask, labels=labels)
