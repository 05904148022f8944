"""One task per ingest shard: tokenize its documents and turn them into examples of the
objective (objectives.py).

Each document goes wholly to train or to validation (a seeded hash of its id) and is
encoded: as one token stream (clm, span) or sentence by sentence (mlm; the ingest
`sentences` column when present, else the text split after . ! ? and a space). Streams
do not cross ingest shards, so shards build independently and in parallel; randomness
(pairing, masks, spans) comes from a generator seeded by (seed, shard, split), so the
bytes depend only on the config and the inputs.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
from tokenizers import Tokenizer

from stages.data.hashing import unit_hash
from stages.data.packed import SPLITS, count_rows, shard_path
from stages.dataset.objectives import ObjectiveSpec, build_writer

_DOCUMENTS_PER_BATCH = 512
_SPLIT_SALT = "validation-split"
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


@dataclass(frozen=True)
class PackJob:
    ingest_shard: Path
    shard_index: int
    tokenizer_file: Path
    output_dir: Path
    spec: ObjectiveSpec
    validation_fraction: float
    seed: int
    max_train_rows: int | None


@dataclass(frozen=True)
class PackedShard:
    train_rows: int
    validation_rows: int
    tokens_encoded: int  # 0 when the shard was already finished by an earlier attempt
    resumed: bool


def is_validation(document_id: str, seed: int, validation_fraction: float) -> bool:
    return unit_hash(document_id, seed, _SPLIT_SALT) < validation_fraction


def split_sentences(text: str) -> list[str]:
    """Fallback when the ingest shards have no `sentences` column."""
    return [s for s in _SENTENCE_END.split(text) if s.strip()]


def pack_shard(job: PackJob) -> PackedShard:
    train_path = job.output_dir / shard_path("train", job.shard_index)
    validation_path = job.output_dir / shard_path("validation", job.shard_index)
    # Validation is renamed first, train last: a finished train file marks a finished shard.
    if train_path.exists() and validation_path.exists():
        return PackedShard(count_rows(train_path), count_rows(validation_path), 0, resumed=True)

    tokenizer = Tokenizer.from_file(str(job.tokenizer_file))
    tokenizer.encode_special_tokens = True  # "<|endoftext|>" written in a text is just text
    writers = {
        split: build_writer(job.spec, str(job.output_dir / shard_path(split, job.shard_index)),
                            job.max_train_rows if split == "train" else None,
                            np.random.default_rng([job.seed, job.shard_index, i]))
        for i, split in enumerate(SPLITS)
    }
    source = pq.ParquetFile(job.ingest_shard)
    columns = ["id", "text"]
    if job.spec.needs_sentences and "sentences" in source.schema_arrow.names:
        columns = ["id", "sentences"]
    tokens_encoded = 0
    for batch in source.iter_batches(_DOCUMENTS_PER_BATCH, columns=columns):
        if writers["train"].full:
            break
        documents = _encode(tokenizer, batch, job.spec.needs_sentences)
        by_split: dict[str, list] = {split: [] for split in SPLITS}
        for doc_id, document in zip(batch.column("id").to_pylist(), documents, strict=True):
            validation = is_validation(doc_id, job.seed, job.validation_fraction)
            by_split["validation" if validation else "train"].append(document)
        for split, split_documents in by_split.items():
            tokens_encoded += writers[split].add(split_documents)
    validation_rows = writers["validation"].commit()
    train_rows = writers["train"].commit()
    return PackedShard(train_rows, validation_rows, tokens_encoded, resumed=False)


def _encode(tokenizer: Tokenizer, batch, by_sentence: bool) -> list:
    """clm/span: one id list per document; mlm: per document, one id array per sentence."""
    if not by_sentence:
        encodings = tokenizer.encode_batch_fast(batch.column("text").to_pylist(),
                                                add_special_tokens=False)
        return [encoding.ids for encoding in encodings]
    if "sentences" in batch.schema.names:
        documents = batch.column("sentences").to_pylist()
    else:
        documents = [split_sentences(text) for text in batch.column("text").to_pylist()]
    flat = [sentence for sentences in documents for sentence in sentences]
    encodings = tokenizer.encode_batch_fast(flat, add_special_tokens=False)
    encoded, start = [], 0
    for sentences in documents:
        encoded.append([np.array(e.ids, dtype=np.int64)
                        for e in encodings[start:start + len(sentences)] if e.ids])
        start += len(sentences)
    return encoded


def remove_partial_files(output_dir: Path) -> None:
    """Temporary files of an interrupted attempt (finished shards are kept)."""
    for partial in output_dir.glob("*/*.partial"):
        os.remove(partial)
