"""Step 1 of ingest, one task per source file (or per piece of a large one, file_pieces.py):
read, clean and filter its documents into a staging Parquet file, and return what the
driver needs to deduplicate across the corpus (a 16-byte digest and the UTF-8 size of each
document) without holding any text."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from stages.ingest.config import IngestConfig
from stages.ingest.file_pieces import WHOLE_FILE, FilePiece
from stages.ingest.filters import build_filters
from stages.ingest.minhash import band_keys, permutations, signature
from stages.ingest.records import record_documents
from stages.ingest.sentences import split_sentences
from stages.ingest.sources import ReadOptions, ReadStats, RecordError, SourceFile, text_documents

DOCUMENT_SCHEMA = pa.schema([
    pa.field("id", pa.string(), nullable=False),
    pa.field("text", pa.string(), nullable=False),
    pa.field("sentences", pa.list_(pa.string()), nullable=False),
    pa.field("source", pa.string(), nullable=False),
    pa.field("source_line", pa.int64(), nullable=False),
    # Record formats: the record's other fields as a JSON object; null for text files.
    pa.field("metadata", pa.string(), nullable=True),
])
DIGEST_BYTES = 16
_FLUSH_ROWS = 8192  # documents buffered before a staging write: bounds memory per task


@dataclass(frozen=True)
class CleanJob:
    file: SourceFile
    staging_path: str
    config: IngestConfig
    piece: FilePiece = WHOLE_FILE
    # Set when another piece of this file was unreadable under on_error 'skip': the whole
    # file is skipped, as unsplit, and this piece is staged empty counting these bytes.
    unreadable_file_bytes: int | None = None

    @property
    def signatures_path(self) -> str | None:
        """Where the MinHash signatures (uint32, one row per kept document) go, if needed."""
        return self.staging_path + ".minhash.npy" if self.config.dedup == "near" else None

    @property
    def bands_path(self) -> str | None:
        """Where the LSH band keys go, band-major (uint64, bands x documents), if needed."""
        return self.staging_path + ".bands.npy" if self.config.dedup == "near" else None


@dataclass(frozen=True)
class CleanedFile:
    """One staged file: its documents in order, and per document its digest and size."""

    staging_path: str
    source_key: str  # "ingest.sources[0]"
    documents_in: int
    bytes_in: int
    invalid_utf8_replaced: int
    removed: dict[str, list[int]]  # filter name -> [documents, UTF-8 bytes] it removed
    skipped_records: int
    skipped_files: int
    gutenberg_lines_stripped: int
    digests: bytes         # DIGEST_BYTES per kept document, concatenated
    text_bytes: np.ndarray  # int64 UTF-8 size of each kept document
    signatures_path: str | None
    bands_path: str | None
    nul_bytes_removed: int = 0

    @property
    def num_documents(self) -> int:
        return len(self.text_bytes)

    @property
    def dropped_short(self) -> int:
        return self.removed.get("min_chars", [0, 0])[0]


def document_id(source_name: str, source_line: int) -> str:
    """Stable, readable, unique: a document is where it starts, like a compiler location."""
    return f"{source_name}:{source_line}"


def clean_file(job: CleanJob) -> CleanedFile:
    """Stage one file. A record error (bad JSON line, invalid UTF-8 under 'fail') raises
    with file:line; any other read error (truncated .gz, unreadable file) raises naming
    the file and the last line read, or with on_error 'skip' stages the file as empty."""
    config = job.config
    stats = ReadStats(lines_read=job.piece.line_offset)
    if job.unreadable_file_bytes is not None:
        return unreadable_file(job, job.unreadable_file_bytes, skipped_files=int(
            job.piece.index == 0))
    try:
        return _clean_file(job, stats)
    except RecordError:
        raise
    except Exception as error:  # noqa: BLE001 - any read failure of a file is reported alike
        if config.on_error == "fail":
            raise ValueError(
                f"{job.file.name}: cannot be read after line {stats.lines_read} "
                f"({type(error).__name__}: {error}); fix or remove the file, or set "
                f"ingest.on_error: skip to leave it out") from error
        return unreadable_file(job, stats.bytes_in, skipped_files=1)


def unreadable_file(job: CleanJob, bytes_in: int, skipped_files: int) -> CleanedFile:
    """Stage a file that could not be read (on_error 'skip') as empty: nothing from a
    half-read file is kept."""
    with pq.ParquetWriter(job.staging_path, DOCUMENT_SCHEMA, compression="none"):
        pass
    if job.signatures_path:
        save_minhash(job, np.zeros((0, job.config.minhash_permutations), np.uint32))
    return CleanedFile(job.staging_path, job.file.config_key, 0, bytes_in, 0, {}, 0,
                       skipped_files, 0, b"", np.zeros(0, dtype=np.int64),
                       job.signatures_path, job.bands_path)


def _clean_file(job: CleanJob, stats: ReadStats) -> CleanedFile:
    config = job.config
    options = ReadOptions(config.normalization, config.unwrap_lines, config.invalid_utf8,
                          config.on_error, config.strip_gutenberg)
    filters = build_filters(config)
    removed = {f.name: [0, 0] for f in filters}
    columns: dict[str, list] = {name: [] for name in DOCUMENT_SCHEMA.names}
    digests, text_bytes, signatures = bytearray(), [], []
    minhash = permutations(config.minhash_permutations) if job.signatures_path else None
    documents_in = 0
    with pq.ParquetWriter(job.staging_path, DOCUMENT_SCHEMA, compression="none") as writer:
        for source_line, text, metadata in read_documents(job.file, options, stats,
                                                          job.piece):
            documents_in += 1
            reason = next((f.name for f in filters if f.rejects(text)), None)
            if reason is not None:
                removed[reason][0] += 1
                removed[reason][1] += len(text.encode("utf-8", "surrogateescape"))
                continue
            encoded = text.encode("utf-8")
            digests += hashlib.blake2b(encoded, digest_size=DIGEST_BYTES).digest()
            text_bytes.append(len(encoded))
            if minhash is not None:
                signatures.append(signature(text, config.minhash_ngram, *minhash))
            columns["id"].append(document_id(job.file.name, source_line))
            columns["text"].append(text)
            columns["sentences"].append(split_sentences(text))
            columns["source"].append(job.file.name)
            columns["source_line"].append(source_line)
            columns["metadata"].append(metadata)
            if len(columns["id"]) >= _FLUSH_ROWS:
                _flush(writer, columns)
        _flush(writer, columns)
    if job.signatures_path:
        save_minhash(job, np.array(signatures, dtype=np.uint32).reshape(
            len(signatures), config.minhash_permutations))
    return CleanedFile(job.staging_path, job.file.config_key, documents_in, stats.bytes_in,
                       stats.invalid_utf8_replaced, removed, stats.skipped_records, 0,
                       stats.gutenberg_lines_stripped, bytes(digests),
                       np.array(text_bytes, dtype=np.int64), job.signatures_path,
                       job.bands_path, nul_bytes_removed=stats.nul_bytes_removed)


def save_minhash(job: CleanJob, signatures: np.ndarray) -> None:
    """Signatures (documents x permutations) and their LSH band keys, band-major so that
    the driver reads one band of a file as one contiguous row (stages/ingest/lsh.py)."""
    np.save(job.signatures_path, signatures)
    np.save(job.bands_path, np.ascontiguousarray(
        band_keys(signatures, job.config.minhash_bands).T))


def read_documents(file: SourceFile, options: ReadOptions, stats: ReadStats,
                   piece: FilePiece = WHOLE_FILE) -> Iterator[tuple[int, str, str | None]]:
    """(location, clean text, metadata JSON or None) for every document of `file` (or of
    one piece of it)."""
    if file.source.format == "text":
        for location, text in text_documents(file, options, stats, piece):
            yield location, text, None
    else:
        yield from record_documents(file, options, stats, piece)


def _flush(writer: pq.ParquetWriter, columns: dict[str, list]) -> None:
    if columns["id"]:
        writer.write_table(pa.table(columns, schema=DOCUMENT_SCHEMA))
        for values in columns.values():
            values.clear()
