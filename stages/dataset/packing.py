"""One task per ingest shard: tokenize its documents and turn them into examples of the
objective (its writer: stages.objectives).

Each document goes wholly to train or to validation (a seeded hash of its id) and is
encoded: as one token stream (clm, span) or sentence by sentence (mlm; the ingest
`sentences` column when present, else the text split after . ! ? and a space). Streams
do not cross ingest shards, so shards build independently and in parallel; randomness
(pairing, masks, spans) comes from a generator seeded by (seed, shard, split), so the
bytes depend only on the config and the inputs.

Speed: the tokenizer is the limit (benchmarks/dataset_throughput.py). It encodes the
next batch of documents in a background thread while this one is packed (it releases
the GIL), and everything after it works on whole arrays, so packing mostly hides behind
encoding. One tokenizer is loaded per process, not per shard (memory stays flat).
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
from tokenizers import Tokenizer

from stages.data.hashing import unit_hash
from stages.data.packed import SPLITS, count_rows, shard_path
from stages.objectives.base import WriterSpec
from stages.objectives.mlm.sentence_pairs import SentenceWindow

_DOCUMENTS_PER_BATCH = 512
_SPLIT_SALT = "validation-split"
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


@dataclass(frozen=True)
class PackJob:
    ingest_shard: Path
    shard_index: int
    tokenizer_file: Path
    output_dir: Path
    spec: WriterSpec
    validation_fraction: float
    seed: int
    max_train_rows: int | None
    # dataset.mixture: the ingest `source` values (files) of this part's documents; the
    # shard's other documents belong to other parts. None: every document.
    sources: frozenset[str] | None = None


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

    tokenizer = _load_tokenizer(str(job.tokenizer_file), job.tokenizer_file.stat().st_mtime_ns)
    writers = {
        split: job.spec.objective.writer(job.spec, str(job.output_dir / shard_path(split, job.shard_index)),
                                         job.max_train_rows if split == "train" else None,
                                         np.random.default_rng([job.seed, job.shard_index, i]))
        for i, split in enumerate(SPLITS)
    }
    source = pq.ParquetFile(job.ingest_shard)
    columns = ["id", "text"]
    if job.spec.objective.by_sentence and "sentences" in source.schema_arrow.names:
        columns = ["id", "sentences"]
    if job.sources is not None:
        columns.append("source")
    tokens_encoded = 0
    for encoded in _encoded_batches(source, columns, job, tokenizer):
        for split, documents in encoded.items():
            tokens_encoded += writers[split].add(documents)
        if writers["train"].full:
            break
    validation_rows = writers["validation"].commit()
    train_rows = writers["train"].commit()
    return PackedShard(train_rows, validation_rows, tokens_encoded, resumed=False)


@functools.lru_cache(maxsize=1)
def _load_tokenizer(path: str, mtime_ns: int) -> Tokenizer:
    """One tokenizer per process for all the shards it packs (keyed by the file's
    modification time too, so that a rewritten file is read again). Loading one per shard
    grew the process by ~6 MB a shard: memory the dropped tokenizers left behind."""
    tokenizer = Tokenizer.from_file(path)
    tokenizer.encode_special_tokens = True  # "<|endoftext|>" written in a text is just text
    return tokenizer


def _encoded_batches(source: pq.ParquetFile, columns: list[str], job: PackJob,
                     tokenizer: Tokenizer) -> Iterator[dict[str, object]]:
    """Per batch of documents: {split: its documents encoded} for the splits it has.
    The next batch is encoded in a background thread while the caller packs this one:
    the tokenizer releases the GIL, so its threads and the packing overlap."""
    def encode(batch) -> dict[str, object] | None:
        if batch is None:
            return None
        # plain lists: Arrow's filter kernels would import pandas (a quarter second)
        texts = batch.column(columns[1]).to_pylist()
        sources = batch.column("source").to_pylist() if job.sources is not None else None
        by_split: dict[str, list] = {split: [] for split in SPLITS}
        for i, (doc_id, text) in enumerate(zip(batch.column("id").to_pylist(), texts, strict=True)):
            if sources is not None and sources[i] not in job.sources:
                continue
            validation = is_validation(doc_id, job.seed, job.validation_fraction)
            by_split["validation" if validation else "train"].append(text)
        return {split: _encode(tokenizer, split_texts, columns[1], job.spec.objective.by_sentence)
                for split, split_texts in by_split.items() if split_texts}

    batches = source.iter_batches(_DOCUMENTS_PER_BATCH, columns=columns)
    with ThreadPoolExecutor(max_workers=1) as prefetch:
        pending = prefetch.submit(encode, next(batches, None))
        while (encoded := pending.result()) is not None:
            pending = prefetch.submit(encode, next(batches, None))
            yield encoded


def _encode(tokenizer: Tokenizer, texts: list, column: str, by_sentence: bool):
    """clm/span: one id list per document; mlm: the documents' sentences as one
    SentenceWindow. `texts` holds the `column` of the documents: text, or sentences."""
    if not by_sentence:
        encodings = tokenizer.encode_batch_fast(texts, add_special_tokens=False)
        return [encoding.ids for encoding in encodings]
    documents = texts if column == "sentences" else [split_sentences(text) for text in texts]
    flat = [sentence for sentences in documents for sentence in sentences]
    encodings = tokenizer.encode_batch_fast(flat, add_special_tokens=False)
    return SentenceWindow.from_encodings([encoding.ids for encoding in encodings],
                                         [len(sentences) for sentences in documents])


def remove_partial_files(output_dir: Path) -> None:
    """Temporary files of an interrupted attempt (finished shards are kept)."""
    for partial in output_dir.glob("*/*.partial"):
        os.remove(partial)
