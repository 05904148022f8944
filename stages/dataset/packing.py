"""One task per ingest shard: tokenize its documents and pack them into CLM rows.

Each document goes wholly to train or to validation (a seeded hash of its id), is
encoded, and is followed by the end-of-text token; each split's stream is cut into rows
of seq_len tokens. Streams do not cross ingest shards, so shards pack independently and
in parallel; each drops its last unfinished row (< seq_len tokens per split and shard).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
from tokenizers import Tokenizer

from stages.data.hashing import unit_hash
from stages.data.packed import count_rows, shard_path
from stages.dataset.rows import RowWriter

_DOCUMENTS_PER_BATCH = 512
_SPLIT_SALT = "validation-split"


@dataclass(frozen=True)
class PackJob:
    ingest_shard: Path
    shard_index: int
    tokenizer_file: Path
    output_dir: Path
    seq_len: int
    dtype: str
    eos_id: int
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


def pack_shard(job: PackJob) -> PackedShard:
    train_path = job.output_dir / shard_path("train", job.shard_index)
    validation_path = job.output_dir / shard_path("validation", job.shard_index)
    # Validation is renamed first, train last: a finished train file marks a finished shard.
    if train_path.exists() and validation_path.exists():
        return PackedShard(count_rows(train_path), count_rows(validation_path), 0, resumed=True)

    tokenizer = Tokenizer.from_file(str(job.tokenizer_file))
    tokenizer.encode_special_tokens = True  # "<|endoftext|>" written in a text is just text
    writers = {
        "train": RowWriter(str(train_path), job.seq_len, job.dtype, job.max_train_rows),
        "validation": RowWriter(str(validation_path), job.seq_len, job.dtype),
    }
    tokens_encoded = 0
    batches = pq.ParquetFile(job.ingest_shard).iter_batches(_DOCUMENTS_PER_BATCH,
                                                             columns=["id", "text"])
    for batch in batches:
        if writers["train"].full:
            break
        encodings = tokenizer.encode_batch_fast(batch.column("text").to_pylist(),
                                                add_special_tokens=False)
        streams: dict[str, list[int]] = {"train": [], "validation": []}
        for doc_id, encoding in zip(batch.column("id").to_pylist(), encodings, strict=True):
            validation = is_validation(doc_id, job.seed, job.validation_fraction)
            stream = streams["validation" if validation else "train"]
            stream += encoding.ids
            stream.append(job.eos_id)
        for split, tokens in streams.items():
            tokens_encoded += len(tokens)
            if tokens:
                writers[split].add(np.array(tokens, dtype=np.int64))
    validation_rows = writers["validation"].commit()
    train_rows = writers["train"].commit()
    return PackedShard(train_rows, validation_rows, tokens_encoded, resumed=False)


def remove_partial_files(output_dir: Path) -> None:
    """Temporary files of an interrupted attempt (finished shards are kept)."""
    for partial in output_dir.glob("*/*.partial"):
        os.remove(partial)
