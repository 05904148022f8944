"""Step 1 of ingest, one task per source file: read, clean and filter its documents into a
staging Parquet file, and return what the driver needs to deduplicate across the corpus
(a 16-byte digest and the UTF-8 size of each document) without holding any text."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from stages.ingest.sources import ReadStats, SourceFile, read_documents

DOCUMENT_SCHEMA = pa.schema([
    pa.field("id", pa.string(), nullable=False),
    pa.field("text", pa.string(), nullable=False),
    pa.field("source", pa.string(), nullable=False),
    pa.field("source_line", pa.int64(), nullable=False),
])
DIGEST_BYTES = 16
_FLUSH_ROWS = 8192  # documents buffered before a staging write: bounds memory per task


@dataclass(frozen=True)
class CleanJob:
    file: SourceFile
    staging_path: str
    normalization: str
    unwrap_lines: bool
    min_chars: int


@dataclass(frozen=True)
class CleanedFile:
    """One staged file: its documents in order, and per document its digest and size."""

    staging_path: str
    documents_in: int
    dropped_short: int
    bytes_in: int
    invalid_utf8_replaced: int
    digests: bytes         # DIGEST_BYTES per kept document, concatenated
    text_bytes: np.ndarray  # int64 UTF-8 size of each kept document

    @property
    def num_documents(self) -> int:
        return len(self.text_bytes)


def document_id(source_name: str, source_line: int) -> str:
    """Stable, readable, unique: a document is where it starts, like a compiler location."""
    return f"{source_name}:{source_line}"


def clean_file(job: CleanJob) -> CleanedFile:
    stats = ReadStats()
    columns: dict[str, list] = {name: [] for name in DOCUMENT_SCHEMA.names}
    digests, text_bytes = bytearray(), []
    documents_in = dropped_short = 0
    with pq.ParquetWriter(job.staging_path, DOCUMENT_SCHEMA, compression="none") as writer:
        for source_line, text in read_documents(job.file, job.normalization, job.unwrap_lines,
                                                stats):
            documents_in += 1
            if len(text) < job.min_chars:
                dropped_short += 1
                continue
            encoded = text.encode("utf-8")
            digests += hashlib.blake2b(encoded, digest_size=DIGEST_BYTES).digest()
            text_bytes.append(len(encoded))
            columns["id"].append(document_id(job.file.name, source_line))
            columns["text"].append(text)
            columns["source"].append(job.file.name)
            columns["source_line"].append(source_line)
            if len(columns["id"]) >= _FLUSH_ROWS:
                _flush(writer, columns)
        _flush(writer, columns)
    return CleanedFile(job.staging_path, documents_in, dropped_short, stats.bytes_in,
                       stats.invalid_utf8_replaced, bytes(digests),
                       np.array(text_bytes, dtype=np.int64))


def _flush(writer: pq.ParquetWriter, columns: dict[str, list]) -> None:
    if columns["id"]:
        writer.write_table(pa.table(columns, schema=DOCUMENT_SCHEMA))
        for values in columns.values():
            values.clear()
