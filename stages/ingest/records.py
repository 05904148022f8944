"""Record formats: JSONL, CSV, Parquet and Hugging Face datasets, one document per record.

Each reader yields (location, fields) per record: location is the 1-based line of the
file where the record starts (JSONL, CSV: the header is line 1) or the 1-based row
number (Parquet, Hugging Face); fields is the record as a dict, or the RecordError that
makes it unreadable. `record_documents` then applies the same rules to every format:
the text field is the document, cleaned like a whole text file; a bad record stops the
stage with file:line (on_error 'fail') or is counted and skipped (on_error 'skip'); the
other fields are kept as a JSON object in the `metadata` column.

A file-level problem (no such column, no such split) always stops the stage: it means
the config does not fit the data, and skipping would silently drop whole files.
Every reader streams: JSONL and CSV line by line, Parquet and datasets in batches.
JSONL, CSV and Parquet readers also read one piece of a large file (file_pieces.py): a
byte range from a line (CSV: record) start, or some row groups; locations stay the whole
file's, and every CSV piece reads the header from the start of the file.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable, Iterator
from typing import Any

import fsspec
import pyarrow.parquet as pq

from stages.ingest.clean import decode_line, split_documents
from stages.ingest.file_pieces import WHOLE_FILE, FilePiece
from stages.ingest.sources import (
    ReadOptions,
    ReadStats,
    RecordError,
    SourceFile,
    counting_nul,
    decoded_lines,
    open_lines,
)

_BATCH_ROWS = 1024  # Parquet / datasets rows per batch: bounds memory per task
# csv's default field limit (128 KiB) would reject a long book in one cell.
_CSV_FIELD_LIMIT = 2**31 - 1

Rows = Iterator[tuple[int, "dict[str, Any] | RecordError"]]


def record_documents(file: SourceFile, options: ReadOptions, stats: ReadStats,
                     piece: FilePiece = WHOLE_FILE) -> Iterator[tuple[int, str, str | None]]:
    """(location, clean text, metadata JSON or None) for every record of `file` (or of
    one piece of it)."""
    reader = _READERS[file.source.format]
    field = file.source.text_field
    for location, fields in reader(file, options, stats, piece):
        if isinstance(fields, dict) and isinstance(fields.get(field), bytes):
            # A binary column: decoded by the invalid_utf8 policy, as a text file's bytes
            # ('fail' stops the stage whatever on_error says).
            fields[field] = _decode(fields[field], location, file, options, stats)
        try:
            if isinstance(fields, RecordError):
                raise fields
            text = _text_of(fields, location, file)
        except RecordError:
            if options.on_error == "fail":
                raise
            stats.skipped_records += 1
            continue
        others = {key: value for key, value in fields.items() if key != field}
        # sort_keys: the same record gives the same bytes whatever its field order.
        metadata = json.dumps(others, ensure_ascii=False, sort_keys=True,
                              default=str) if others else None
        # The whole record is one document: its paragraphs are cleaned like a text file's.
        lines = counting_nul(text.split("\n"), stats)
        for _, document in split_documents(lines, "file", options.normalization,
                                           options.unwrap_lines):
            yield location, document, metadata


def _decode(value: bytes, location: int, file: SourceFile, options: ReadOptions,
            stats: ReadStats) -> str:
    text, replaced = decode_line(value, keep_invalid=options.invalid_utf8 == "skip")
    if replaced and options.invalid_utf8 == "fail":
        raise RecordError(
            f"{file.name}:{location}: {replaced} byte(s) of field {file.source.text_field!r} "
            f"that are not valid UTF-8; re-encode the data, or set ingest.invalid_utf8 to "
            f"'replace' or 'skip'")
    stats.invalid_utf8_replaced += replaced
    return text


def _text_of(fields: dict[str, Any], location: int, file: SourceFile) -> str:
    field = file.source.text_field
    value = fields.get(field)
    if not isinstance(value, str):
        problem = ("is missing" if field not in fields
                   else f"is {'null' if value is None else f'a {type(value).__name__}'}, "
                        f"not a string")
        raise RecordError(
            f"{file.name}:{location}: text field {field!r} {problem} (keys: "
            f"{', '.join(sorted(fields))}); set {file.config_key}.text_field to the field "
            f"that holds the document text (or ingest.on_error: skip to skip such records)")
    return value


def _require_column(columns: Iterable[str], file: SourceFile, what: str) -> None:
    columns = list(columns)
    if file.source.text_field not in columns:
        raise RecordError(
            f"{file.name}: no {what} {file.source.text_field!r} (found: "
            f"{', '.join(columns) or 'none'}); set {file.config_key}.text_field to the {what} "
            f"that holds the document text")


# --- the readers ------------------------------------------------------------------------

def _jsonl_rows(file: SourceFile, options: ReadOptions, stats: ReadStats,
                piece: FilePiece) -> Rows:
    with open_lines(file.url, piece) as stream:
        for line_number, line in enumerate(
                decoded_lines(stream, file, options.invalid_utf8, stats, piece.first_line),
                start=piece.first_line):
            if line.strip():
                yield line_number, _json_object(line, line_number, file)


def _json_object(line: str, line_number: int, file: SourceFile) -> dict | RecordError:
    try:
        record = json.loads(line)
    except json.JSONDecodeError as error:
        return RecordError(
            f"{file.name}:{line_number}: not valid JSON ({error.msg}, column {error.colno}); "
            f"every line of a {file.config_key} JSONL file must be one JSON object: "
            f"fix or delete that line (or set ingest.on_error: skip)")
    if not isinstance(record, dict):
        return RecordError(
            f"{file.name}:{line_number}: a JSON {type(record).__name__}, not an object; "
            f"every line of a {file.config_key} JSONL file must be one JSON object")
    return record


def _csv_rows(file: SourceFile, options: ReadOptions, stats: ReadStats,
              piece: FilePiece) -> Rows:
    csv.field_size_limit(_CSV_FIELD_LIMIT)
    # A later piece starts at a record (split_csv.py) and needs the header all the same.
    header = None if piece.index == 0 else _csv_header(file, options)
    offset = piece.line_offset  # reader.line_num counts the piece's lines
    with open_lines(file.url, piece) as stream:
        lines = decoded_lines(stream, file, options.invalid_utf8, stats, piece.first_line)
        reader = _csv_reader(lines, file)
        try:
            if header is None:
                header = next(reader, None)
                if header is None:
                    return  # an empty file holds no documents
                _require_column(header, file, "column")
            start = offset + reader.line_num + 1
            for values in reader:
                location, start = start, offset + reader.line_num + 1
                if not values:
                    continue  # a blank line
                if len(values) != len(header):
                    yield location, RecordError(
                        f"{file.name}:{location}: {len(values)} fields where the header has "
                        f"{len(header)}; quote cells that hold the delimiter "
                        f"{file.source.csv_delimiter!r} or set {file.config_key}.csv_delimiter")
                    continue
                yield location, dict(zip(header, values, strict=True))
        except csv.Error as error:  # e.g. a quote left open at the end of the file
            raise _csv_error(file, offset + reader.line_num, error) from None


def _csv_reader(lines: Iterator[str], file: SourceFile):
    # decoded_lines strips line endings; csv needs them to keep a quoted cell's breaks.
    # strict: a quote left open would otherwise swallow the rest of the file silently.
    # split_csv.py follows this reader's states to find where a piece may start.
    return csv.reader((line + "\n" for line in lines), delimiter=file.source.csv_delimiter,
                      strict=True)


def _csv_header(file: SourceFile, options: ReadOptions) -> list[str]:
    """The first record of the file, read as the first piece reads it (its counts are
    the first piece's, hence the stats thrown away)."""
    with open_lines(file.url) as stream:
        reader = _csv_reader(decoded_lines(stream, file, options.invalid_utf8, ReadStats()),
                             file)
        try:
            header = next(reader, [])
        except csv.Error as error:
            raise _csv_error(file, reader.line_num, error) from None
    _require_column(header, file, "column")
    return header


def _csv_error(file: SourceFile, line: int, error: csv.Error) -> RecordError:
    return RecordError(f"{file.name}:{line}: not valid CSV ({error}); fix the file or check "
                       f"{file.config_key}.csv_delimiter")


def _parquet_rows(file: SourceFile, options: ReadOptions, stats: ReadStats,
                  piece: FilePiece) -> Rows:
    with fsspec.open(file.url, "rb") as stream:
        parquet = pq.ParquetFile(stream)
        _require_column(parquet.schema_arrow.names, file, "column")
        row = piece.line_offset
        for batch in parquet.iter_batches(_BATCH_ROWS, row_groups=piece.row_groups):
            for fields in batch.to_pylist():
                row += 1
                stats.lines_read = row
                stats.bytes_in += _text_size(fields.get(file.source.text_field))
                yield row, fields


def _huggingface_rows(file: SourceFile, options: ReadOptions, stats: ReadStats,
                      piece: FilePiece) -> Rows:
    assert piece.whole_file, "Hugging Face datasets are never split"
    dataset = _load_huggingface(file)
    if dataset.column_names is not None:  # None for a streamed dataset of unknown features
        _require_column(dataset.column_names, file, "column")
    row = 0
    for batch in dataset.iter(batch_size=_BATCH_ROWS):
        for values in zip(*batch.values(), strict=True):
            row += 1
            fields = dict(zip(batch.keys(), values, strict=True))
            stats.lines_read = row
            stats.bytes_in += _text_size(fields.get(file.source.text_field))
            yield row, fields


def _load_huggingface(file: SourceFile):
    import datasets  # ~1 s to import: only for huggingface sources

    source = file.source
    if file.hf_hub:
        try:
            # streaming: rows arrive as they download; nothing is cached whole on disk.
            return datasets.load_dataset(source.path, source.hf_config_name,
                                         split=source.hf_split, streaming=True)
        except Exception as error:  # noqa: BLE001 - offline, unknown name, bad split alike
            raise RecordError(
                f"{file.config_key}.path = {source.path!r} is not a directory under data_dir, "
                f"and datasets.load_dataset could not load it from the Hugging Face Hub "
                f"({type(error).__name__}: {error}); point it at a datasets.save_to_disk "
                f"directory, or check the name, hf_config_name and hf_split") from None
    try:
        dataset = datasets.load_from_disk(file.url)
    except FileNotFoundError as error:
        raise RecordError(
            f"{file.name}: not a datasets.save_to_disk directory ({error}); point "
            f"{file.config_key}.path at the folder save_to_disk wrote") from None
    if isinstance(dataset, datasets.DatasetDict):
        if source.hf_split not in dataset:
            raise RecordError(
                f"{file.name}: no split {source.hf_split!r} (splits: "
                f"{', '.join(dataset)}); set {file.config_key}.hf_split to one of them")
        dataset = dataset[source.hf_split]
    return dataset


def _text_size(value: Any) -> int:
    if isinstance(value, str):
        return len(value.encode("utf-8", "surrogatepass"))
    return len(value) if isinstance(value, bytes) else 0


_READERS = {"jsonl": _jsonl_rows, "csv": _csv_rows, "parquet": _parquet_rows,
            "huggingface": _huggingface_rows}
