"""Corpus sources: config paths -> sorted file lists -> streams of clean documents.

Files are opened through fsspec, so a source can be a local path, a glob, or a URL
(s3://, gs://, https://) where the matching fsspec backend is installed; compressed
files (.gz, .bz2, .zst) are decompressed on the fly. Every file is read line by line:
memory stays flat whatever the file size.
"""

from __future__ import annotations

import json
import os
import posixpath
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import fsspec

from stages.ingest.clean import decode_line, split_documents
from stages.ingest.config import SourceConfig

_GLOB_CHARS = frozenset("*?[")


@dataclass(frozen=True)
class SourceFile:
    """One file to read. `url` is what fsspec opens; `name` is what the `source` column
    shows: relative to data_dir when the config path was, so outputs do not depend on
    where the data happens to be mounted."""

    url: str
    name: str
    config_key: str  # "ingest.sources[0]", for error messages
    source: SourceConfig


@dataclass
class ReadStats:
    bytes_in: int = 0
    lines_read: int = 0
    invalid_utf8_replaced: int = 0
    skipped_records: int = 0
    gutenberg_lines_stripped: int = 0


class RecordError(ValueError):
    """A bad line or record; the message names file and line and what to do."""


# "*** START OF THE PROJECT GUTENBERG EBOOK THE DUNWICH HORROR ***" (also THIS, and older
# "***START OF THE PROJECT GUTENBERG EBOOK"); the END line opens the licence footer.
_GUTENBERG_START = re.compile(r"^\s*\*\*\*\s*START OF TH(?:E|IS) PROJECT GUTENBERG EBOOK", re.I)
_GUTENBERG_END = re.compile(r"^\s*\*\*\*\s*END OF TH(?:E|IS) PROJECT GUTENBERG EBOOK", re.I)
_GUTENBERG_HEADER_MAX_LINES = 2000  # the START line comes within the first few hundred


def resolve_sources(sources: list[SourceConfig], data_dir: Path) -> list[SourceFile]:
    """Every file the sources name: sources in config order, files sorted within a source.
    A file named by two sources is read once, by the first."""
    files: list[SourceFile] = []
    seen: set[str] = set()
    for index, source in enumerate(sources):
        config_key = f"ingest.sources[{index}]"
        pattern, relative = _absolute(source.path, data_dir)
        fs, fs_pattern = fsspec.core.url_to_fs(pattern)
        matches = _list_files(fs, fs_pattern)
        if not matches:
            raise FileNotFoundError(
                f"{config_key}.path = {source.path!r} matched no files (resolved to {pattern}"
                f"{f', relative to data_dir {data_dir}' if relative else ''}); check the path "
                f"and glob, or point the experiment's data_dir (DATA_DIR) at the folder "
                f"that holds it")
        for match in matches:
            url = match if _is_local(fs) else fs.unstrip_protocol(match)
            if url in seen:
                continue
            seen.add(url)
            name = Path(os.path.relpath(match, data_dir)).as_posix() if relative else url
            files.append(SourceFile(url, name, config_key, source))
    return files


@dataclass(frozen=True)
class ReadOptions:
    normalization: str = "NFC"
    unwrap_lines: bool = True
    invalid_utf8: str = "replace"  # replace | skip | fail
    on_error: str = "fail"         # fail | skip
    strip_gutenberg: bool = False


def read_documents(file: SourceFile, options: ReadOptions,
                   stats: ReadStats) -> Iterator[tuple[int, str]]:
    """(1-based line where the document starts, clean text) for every document in `file`."""
    with fsspec.open(file.url, "rb", compression="infer") as stream:
        lines = _decoded_lines(stream, file, options.invalid_utf8, stats)
        if file.source.format == "jsonl":
            yield from _jsonl_documents(lines, file, options, stats)
        else:
            if options.strip_gutenberg:
                lines = _strip_gutenberg(lines, stats)
            yield from split_documents(lines, file.source.split, options.normalization,
                                       options.unwrap_lines)


def _strip_gutenberg(lines: Iterator[str], stats: ReadStats) -> Iterator[str]:
    """Blank out the lines up to and including the START marker and from the END marker
    on (blank, not dropped, so line numbers stay true). Only the first
    _GUTENBERG_HEADER_MAX_LINES lines are held back while looking for START."""
    held: list[str] = []
    for line in lines:
        held.append(line)
        if _GUTENBERG_START.match(line):
            stats.gutenberg_lines_stripped += len(held)
            yield from [""] * len(held)
            break
        if len(held) >= _GUTENBERG_HEADER_MAX_LINES:
            yield from held
            break
    else:
        yield from held  # a short file without a START line: kept whole
        return
    for line in lines:
        if _GUTENBERG_END.match(line):
            stats.gutenberg_lines_stripped += 1 + sum(1 for _ in lines)
            return
        yield line


def _jsonl_documents(lines: Iterator[str], file: SourceFile, options: ReadOptions,
                     stats: ReadStats) -> Iterator[tuple[int, str]]:
    for line_number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            text = _record_text(line, line_number, file)
        except RecordError:
            if options.on_error == "fail":
                raise
            stats.skipped_records += 1
            continue
        # The whole record is one document: its paragraphs are cleaned like a text file's.
        for _, document in split_documents(text.split("\n"), "file", options.normalization,
                                           options.unwrap_lines):
            yield line_number, document


def _record_text(line: str, line_number: int, file: SourceFile) -> str:
    field = file.source.text_field
    try:
        record = json.loads(line)
    except json.JSONDecodeError as error:
        raise RecordError(
            f"{file.name}:{line_number}: not valid JSON ({error.msg}, column {error.colno}); "
            f"every line of a {file.config_key} JSONL file must be one JSON object: "
            f"fix or delete that line (or set ingest.on_error: skip)") from None
    if not isinstance(record, dict):
        raise RecordError(
            f"{file.name}:{line_number}: a JSON {type(record).__name__}, not an object; "
            f"every line of a {file.config_key} JSONL file must be one JSON object")
    text = record.get(field)
    if not isinstance(text, str):
        problem = ("is missing" if field not in record
                   else f"is a {type(text).__name__}, not a string")
        raise RecordError(
            f"{file.name}:{line_number}: text field {field!r} {problem} (keys: "
            f"{', '.join(sorted(record))}); set {file.config_key}.text_field to the field "
            f"that holds the document text")
    return text


def _decoded_lines(stream, file: SourceFile, invalid_utf8: str,
                   stats: ReadStats) -> Iterator[str]:
    for line_number, raw in enumerate(stream, start=1):
        stats.bytes_in += len(raw)
        stats.lines_read = line_number
        text, replaced = decode_line(raw, keep_invalid=invalid_utf8 == "skip")
        if replaced and invalid_utf8 == "fail":
            raise RecordError(
                f"{file.name}:{line_number}: {replaced} byte(s) that are not valid UTF-8; "
                f"re-encode the file as UTF-8, or set ingest.invalid_utf8 to 'replace' or 'skip'")
        stats.invalid_utf8_replaced += replaced
        yield text.removeprefix("\ufeff") if line_number == 1 else text


def _absolute(path: str, data_dir: Path) -> tuple[str, bool]:
    """(path or URL to list, whether it was relative to data_dir)."""
    if "://" in path or os.path.isabs(os.path.expanduser(path)):
        return os.path.expanduser(path), False
    return str(data_dir / path), True


def _list_files(fs, pattern: str) -> list[str]:
    if _GLOB_CHARS & set(pattern):
        found = fs.glob(pattern, detail=True)
        return sorted(path for path, info in found.items() if info["type"] == "file")
    if fs.isdir(pattern):
        # Skip hidden files and folders (.git, .DS_Store) under a directory source.
        return sorted(path for path in fs.find(pattern)
                      if not any(part.startswith(".")
                                 for part in posixpath.relpath(path, pattern).split("/")))
    return [pattern] if fs.isfile(pattern) else []


def _is_local(fs) -> bool:
    return "file" in (fs.protocol if isinstance(fs.protocol, tuple) else (fs.protocol,))
