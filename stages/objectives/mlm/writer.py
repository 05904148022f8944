"""mlm examples: a window of documents as sentences (SentenceWindow) -> BERT pairs as
slices of it (sentence_pairs.py) -> [CLS] A [SEP] B [SEP] padded to seq_len, assembled as
one array; static masking stores the masked ids and labels (by token, whole word, or
SpanBERT span: masking.py)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from stages.data.example_writer import ExampleWriter, column_field
from stages.objectives.base import WriterSpec
from stages.objectives.mlm.masking import masking_policy
from stages.objectives.mlm.sentence_pairs import PairSpans, SentenceWindow, window_pairs


class MlmWriter:
    """Columns: input_ids, token_type_ids (uint8), num_tokens (before padding),
    next_sentence_label (int8, 0 = B follows A / in order, 1 = random / swapped; nsp and
    sop only), labels (static masking: the original id where masked, pad elsewhere)."""

    def __init__(self, spec: WriterSpec, path: str, max_rows: int | None,
                 rng: np.random.Generator):
        self.spec, self.rng = spec, rng
        self.settings, ids = spec.entries["mlm"], spec.ids
        missing = [name for name in ("cls", "sep", "mask", "pad") if getattr(ids, name) is None]
        if missing:
            raise ValueError(
                f"dataset.objective: mlm needs the special tokens [CLS] [SEP] [MASK] [PAD]; "
                f"the tokenizer has no {', '.join(missing)} token: use tokenizer.kind: "
                f"wordpiece (the BERT recipe)")
        self.static = self.settings["masking"] == "static"
        self.policy = masking_policy(spec.entries, ids.vocab_size) if self.static else None
        fields = [column_field("input_ids", spec.dtype, spec.seq_len),
                  column_field("token_type_ids", "uint8", spec.seq_len),
                  column_field("num_tokens", "int32", None)]
        if self.settings["sentence_task"] != "none":
            fields.append(column_field("next_sentence_label", "int8", None))
        if self.static:
            fields.append(column_field("labels", spec.dtype, spec.seq_len))
        self._writer = ExampleWriter(path, pa.schema(fields), max_rows)

    @property
    def full(self) -> bool:
        return self._writer.full

    def add(self, window: SentenceWindow) -> int:
        task = self.settings["sentence_task"]
        max_num_tokens = self.spec.seq_len - (2 if task == "none" else 3)
        if window.num_documents:
            spans = PairSpans.concatenate([
                window_pairs(window, task, max_num_tokens, self.settings["short_seq_prob"], self.rng)
                for _ in range(self.settings["dupe_factor"] if self.static else 1)])
            if len(spans):
                self._writer.add(self._assemble(window.tokens, spans))
        return len(window.tokens)

    def _assemble(self, tokens: np.ndarray, spans: PairSpans) -> dict[str, np.ndarray]:
        """[CLS] A [SEP] B [SEP] [PAD]... for every pair at once: A and B are copied
        into place with one gather and one scatter over all pairs (`_copy_segments`),
        then the special tokens are set per row."""
        ids, seq_len = self.spec.ids, self.spec.seq_len
        has_b = self.settings["sentence_task"] != "none"
        num = len(spans)
        length_a, length_b = spans.a_stop - spans.a_start, spans.b_stop - spans.b_start
        row_start = np.arange(num, dtype=np.int64) * seq_len
        input_ids = np.full((num, seq_len), ids.pad, dtype=np.int64)
        b_positions = _copy_segments(
            input_ids, tokens, np.concatenate([spans.a_start, spans.b_start]),
            np.concatenate([row_start + 1, row_start + length_a + 2]),
            np.concatenate([length_a, length_b]), num)
        num_tokens = length_a + 2 + (length_b + 1 if has_b else 0)
        rows = np.arange(num)
        input_ids[:, 0] = ids.cls
        input_ids[rows, length_a + 1] = ids.sep
        token_type_ids = np.zeros((num, seq_len), dtype=np.uint8)
        columns = {"token_type_ids": token_type_ids, "num_tokens": num_tokens.astype(np.int32)}
        if has_b:
            input_ids[rows, num_tokens - 1] = ids.sep
            token_type_ids.flat[b_positions] = 1
            token_type_ids[rows, num_tokens - 1] = 1
            columns["next_sentence_label"] = spans.label.astype(np.int8)
        if self.static:
            input_ids, labels = self.policy.mask_rows(input_ids, self.rng)
            columns["labels"] = np.where(labels < 0, ids.pad, labels)
        return {"input_ids": input_ids, **columns}

    def commit(self) -> int:
        return self._writer.commit()


def _copy_segments(out: np.ndarray, tokens: np.ndarray, sources: np.ndarray,
                   destinations: np.ndarray, lengths: np.ndarray, first_b: int) -> np.ndarray:
    """out.flat[destinations[i]:+lengths[i]] = tokens[sources[i]:+lengths[i]] for every
    segment i at once; returns the flat positions written by segments first_b.. (B's)."""
    offsets = np.cumsum(lengths) - lengths
    within = np.arange(int(lengths.sum()), dtype=np.int64) - np.repeat(offsets, lengths)
    targets = np.repeat(destinations, lengths) + within
    out.flat[targets] = tokens[np.repeat(sources, lengths) + within]
    return targets[offsets[first_b]:] if first_b < len(lengths) else targets[:0]
