"""The three objectives as parts with one shape: a writer per (shard, split) that takes
a window of encoded documents and writes examples. packing.py does the rest (reading,
splitting, encoding) the same way for all of them.

    clm   documents as token streams, each followed by eos, cut into rows (RowWriter);
          document boundaries are the eos tokens (the loader derives document_ids).
    mlm   documents as lists of sentences -> BERT pairs (sentence_pairs.py), [CLS] A [SEP]
          B [SEP] padded to seq_len; static masking stores the masked ids and labels.
    span  documents as token streams, each followed by eos, cut into chunks of T5's raw
          length (random_spans_helper), each corrupted into inputs + targets.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from stages.data.masking import MaskingPolicy
from stages.data.span_corruption import corrupt, random_spans_helper, random_spans_noise_mask
from stages.dataset.config import DatasetConfig
from stages.dataset.examples import ExampleWriter, column_field
from stages.dataset.rows import RowWriter
from stages.dataset.sentence_pairs import document_pairs


@dataclass(frozen=True)
class TokenIds:
    """The ids an objective needs, resolved from the tokenizer's special-token roles."""
    vocab_size: int
    eos: int | None = None
    pad: int | None = None
    cls: int | None = None
    sep: int | None = None
    mask: int | None = None
    special: tuple[int, ...] = ()
    sentinels: tuple[int, ...] = ()   # <extra_id_0>, <extra_id_1>, ... in order
    continuation: tuple[int, ...] = field(default=(), repr=False)  # ids that do not start a word


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


def masking_policy(config: DatasetConfig, ids: TokenIds) -> MaskingPolicy:
    word_start = None
    if config.mlm.whole_word_masking:
        word_start = np.ones(ids.vocab_size, dtype=bool)
        word_start[list(ids.continuation)] = False
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

    def add(self, documents: list[list[int]], others=None) -> int:
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

    def add(self, documents: list[list[int]], others=None) -> int:
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

    def add(self, documents: list[list[np.ndarray]], others=None) -> int:
        config, ids = self.spec.config, self.spec.ids
        task = config.mlm.sentence_task
        max_num_tokens = config.seq_len - (2 if task == "none" else 3)
        documents = [d for d in documents if d]
        pairs = []
        for _ in range(config.mlm.dupe_factor if self.static else 1):
            for i, document in enumerate(documents):
                window = documents[:i] + documents[i + 1:]
                pairs += document_pairs(document, window, task, max_num_tokens,
                                        config.mlm.short_seq_prob, self.rng)
        if pairs:
            self._writer.add(self._assemble(pairs))
        return sum(len(s) for d in documents for s in d)

    def _assemble(self, pairs) -> dict[str, np.ndarray]:
        ids, seq_len = self.spec.ids, self.spec.config.seq_len
        num = len(pairs)
        input_ids = np.full((num, seq_len), ids.pad, dtype=np.int64)
        token_type_ids = np.zeros((num, seq_len), dtype=np.uint8)
        num_tokens = np.empty(num, dtype=np.int32)
        labels = np.full((num, seq_len), ids.pad, dtype=np.int64)
        nsp = np.empty(num, dtype=np.int8)
        for row, (a, b, label) in enumerate(pairs):
            parts = [[ids.cls], a, [ids.sep]] + ([] if b is None else [b, [ids.sep]])
            example = np.concatenate(parts)
            n = len(example)
            input_ids[row, :n] = example
            if b is not None:
                token_type_ids[row, len(a) + 2:n] = 1
            num_tokens[row], nsp[row] = n, label
            if self.static:
                input_ids[row], row_labels = self.policy.mask(input_ids[row], self.rng)
                labels[row] = np.where(row_labels < 0, ids.pad, row_labels)
        columns = {"input_ids": input_ids, "token_type_ids": token_type_ids,
                   "num_tokens": num_tokens}
        if self.spec.config.mlm.sentence_task != "none":
            columns["next_sentence_label"] = nsp
        if self.static:
            columns["labels"] = labels
        return columns

    def commit(self) -> int:
        return self._writer.commit()
