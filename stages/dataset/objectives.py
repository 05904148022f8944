"""The three objectives as parts with one shape: a writer per (shard, split) that takes
a window of encoded documents and writes examples. packing.py does the rest (reading,
splitting, encoding) the same way for all of them.

    clm   documents as token streams, each followed by eos, cut into rows (RowWriter);
          document boundaries are the eos tokens (the loader derives document_ids).
    mlm   a window of documents as sentences (SentenceWindow) -> BERT pairs as slices of
          it (sentence_pairs.py) -> [CLS] A [SEP] B [SEP] padded to seq_len, assembled as
          one array; static masking stores the masked ids and labels (by token, whole
          word, or SpanBERT span: stages/data/span_masking.py).
    span  documents as token streams, each followed by eos, cut into chunks of T5's raw
          length (random_spans_helper), each corrupted into inputs + targets.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from stages.data.masking import MaskingPolicy
from stages.data.span_corruption import corrupt, random_spans_helper, random_spans_noise_mask
from stages.data.span_masking import SpanMaskingPolicy
from stages.dataset.config import DatasetConfig
from stages.dataset.examples import ExampleWriter, column_field
from stages.dataset.rows import RowWriter
from stages.dataset.sentence_pairs import PairSpans, SentenceWindow, window_pairs
from stages.tokenizer.output import TokenIds


@dataclass(frozen=True)
class ObjectiveSpec:
    """Everything a writer needs, picklable (it travels to Ray tasks inside a PackJob)."""
    objective: str
    config: DatasetConfig
    dtype: str
    ids: TokenIds

    @property
    def needs_sentences(self) -> bool:
        return self.objective == "mlm"


def span_lengths(config: DatasetConfig) -> tuple[int, int]:
    """(raw tokens per example, targets length) for inputs of seq_len."""
    return random_spans_helper(config.seq_len, config.span.noise_density,
                               config.span.mean_noise_span_length)


def masking_policy(config: DatasetConfig, ids: TokenIds) -> MaskingPolicy | SpanMaskingPolicy:
    word_start = None
    if config.mlm.unit != "token":
        word_start = np.ones(ids.vocab_size, dtype=bool)
        word_start[list(ids.continuation)] = False
    if config.mlm.unit == "span":
        mlm = config.mlm
        return SpanMaskingPolicy(
            mask_id=ids.mask, special_ids=np.array(ids.special, dtype=np.int64),
            vocab_size=ids.vocab_size, word_start=word_start, mask_prob=mlm.mask_prob,
            mask_token_prob=mlm.mask_token_prob, random_token_prob=mlm.random_token_prob,
            geometric_p=mlm.span_geometric_p, max_span_words=mlm.max_span_words)
    return MaskingPolicy(mask_id=ids.mask, special_ids=np.array(ids.special, dtype=np.int64),
                         vocab_size=ids.vocab_size, mask_prob=config.mlm.mask_prob,
                         mask_token_prob=config.mlm.mask_token_prob,
                         random_token_prob=config.mlm.random_token_prob, word_start=word_start)


def build_writer(spec: ObjectiveSpec, path: str, max_rows: int | None,
                 rng: np.random.Generator):
    return {"clm": ClmWriter, "mlm": MlmWriter, "span": SpanWriter}[spec.objective](
        spec, path, max_rows, rng)


class ClmWriter:
    def __init__(self, spec: ObjectiveSpec, path: str, max_rows: int | None,
                 rng: np.random.Generator):
        self.eos = spec.ids.eos
        self._rows = RowWriter(path, spec.config.seq_len, spec.dtype, max_rows)

    @property
    def full(self) -> bool:
        return self._rows.full

    def add(self, documents: list[list[int]]) -> int:
        stream: list[int] = []
        for ids in documents:
            stream += ids
            stream.append(self.eos)
        if stream:
            self._rows.add(np.array(stream, dtype=np.int64))
        return len(stream)

    def commit(self) -> int:
        return self._rows.commit()


class SpanWriter:
    def __init__(self, spec: ObjectiveSpec, path: str, max_rows: int | None,
                 rng: np.random.Generator):
        self.spec, self.rng = spec, rng
        self.raw_length, self.targets_length = span_lengths(spec.config)
        if len(spec.ids.sentinels) < self._max_spans():
            raise ValueError(
                f"span corruption of seq_len={spec.config.seq_len} needs "
                f"{self._max_spans()} sentinel tokens <extra_id_0>.., the tokenizer has "
                f"{len(spec.ids.sentinels)}; use tokenizer.kind: unigram (T5 recipe) or lower "
                f"dataset.seq_len")
        self.sentinels = np.array(spec.ids.sentinels, dtype=np.int64)
        schema = pa.schema([column_field("input_ids", spec.dtype, spec.config.seq_len),
                            column_field("labels", spec.dtype, self.targets_length)])
        self._writer = ExampleWriter(path, schema, max_rows)
        self._pending = np.empty(0, dtype=np.int64)

    def _max_spans(self) -> int:
        from stages.data.span_corruption import num_noise_spans
        return num_noise_spans(self.raw_length, self.spec.config.span.noise_density,
                               self.spec.config.span.mean_noise_span_length)

    @property
    def full(self) -> bool:
        return self._writer.full

    def add(self, documents: list[list[int]]) -> int:
        stream: list[int] = []
        for ids in documents:
            stream += ids
            stream.append(self.spec.ids.eos)
        tokens = np.concatenate([self._pending, np.array(stream, dtype=np.int64)])
        num = len(tokens) // self.raw_length
        chunks = tokens[:num * self.raw_length].reshape(num, self.raw_length)
        self._pending = tokens[num * self.raw_length:]
        inputs = np.empty((num, self.spec.config.seq_len), dtype=np.int64)
        targets = np.empty((num, self.targets_length), dtype=np.int64)
        span = self.spec.config.span
        for row, chunk in enumerate(chunks):
            mask = random_spans_noise_mask(self.raw_length, span.noise_density,
                                           span.mean_noise_span_length, self.rng)
            inputs[row], targets[row] = corrupt(chunk, mask, self.sentinels, self.spec.ids.eos)
        if num:
            self._writer.add({"input_ids": inputs, "labels": targets})
        return len(stream)

    def commit(self) -> int:
        return self._writer.commit()  # the unfinished last chunk is dropped, as clm does


class MlmWriter:
    """Columns: input_ids, token_type_ids (uint8), num_tokens (before padding),
    next_sentence_label (int8, 0 = B follows A / in order, 1 = random / swapped; nsp and
    sop only), labels (static masking: the original id where masked, pad elsewhere)."""

    def __init__(self, spec: ObjectiveSpec, path: str, max_rows: int | None,
                 rng: np.random.Generator):
        self.spec, self.rng = spec, rng
        config, ids = spec.config, spec.ids
        missing = [name for name in ("cls", "sep", "mask", "pad") if getattr(ids, name) is None]
        if missing:
            raise ValueError(
                f"dataset.objective: mlm needs the special tokens [CLS] [SEP] [MASK] [PAD]; "
                f"the tokenizer has no {', '.join(missing)} token: use tokenizer.kind: "
                f"wordpiece (the BERT recipe)")
        self.static = config.mlm.masking == "static"
        self.policy = masking_policy(config, ids) if self.static else None
        fields = [column_field("input_ids", spec.dtype, config.seq_len),
                  column_field("token_type_ids", "uint8", config.seq_len),
                  column_field("num_tokens", "int32", None)]
        if config.mlm.sentence_task != "none":
            fields.append(column_field("next_sentence_label", "int8", None))
        if self.static:
            fields.append(column_field("labels", spec.dtype, config.seq_len))
        self._writer = ExampleWriter(path, pa.schema(fields), max_rows)

    @property
    def full(self) -> bool:
        return self._writer.full

    def add(self, window: SentenceWindow) -> int:
        config = self.spec.config
        task = config.mlm.sentence_task
        max_num_tokens = config.seq_len - (2 if task == "none" else 3)
        if window.num_documents:
            spans = PairSpans.concatenate([
                window_pairs(window, task, max_num_tokens, config.mlm.short_seq_prob, self.rng)
                for _ in range(config.mlm.dupe_factor if self.static else 1)])
            if len(spans):
                self._writer.add(self._assemble(window.tokens, spans))
        return len(window.tokens)

    def _assemble(self, tokens: np.ndarray, spans: PairSpans) -> dict[str, np.ndarray]:
        """[CLS] A [SEP] B [SEP] [PAD]... for every pair at once: A and B are copied
        into place with one gather and one scatter over all pairs (`_copy_segments`),
        then the special tokens are set per row."""
        ids, seq_len = self.spec.ids, self.spec.config.seq_len
        has_b = self.spec.config.mlm.sentence_task != "none"
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
