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
    invalid_utf8_replaced: int = 0


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


def read_documents(file: SourceFile, normalization: str, unwrap_lines: bool,
                   stats: ReadStats) -> Iterator[tuple[int, str]]:
    """(1-based line where the document starts, clean text) for every document in `file`."""
    with fsspec.open(file.url, "rb", compression="infer") as stream:
        lines = _decoded_lines(stream, stats)
        if file.source.format == "jsonl":
            yield from _jsonl_documents(lines, file, normalization, unwrap_lines)
        else:
            yield from split_documents(lines, file.source.split, normalization, unwrap_lines)


def _jsonl_documents(lines: Iterator[str], file: SourceFile, normalization: str,
                     unwrap_lines: bool) -> Iterator[tuple[int, str]]:
    field = file.source.text_field
    for line_number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            raise ValueError(
                f"{file.name}:{line_number}: not valid JSON ({error.msg}, column {error.colno}); "
                f"every line of a {file.config_key} JSONL file must be one JSON object: "
                f"fix or delete that line") from None
        if not isinstance(record, dict):
            raise ValueError(
                f"{file.name}:{line_number}: a JSON {type(record).__name__}, not an object; "
                f"every line of a {file.config_key} JSONL file must be one JSON object")
        text = record.get(field)
        if not isinstance(text, str):
            problem = ("is missing" if field not in record
                       else f"is a {type(text).__name__}, not a string")
            raise ValueError(
                f"{file.name}:{line_number}: text field {field!r} {problem} (keys: "
                f"{', '.join(sorted(record))}); set {file.config_key}.text_field to the field "
                f"that holds the document text")
        # The whole record is one document: its paragraphs are cleaned like a text file's.
        for _, document in split_documents(text.split("\n"), "file", normalization, unwrap_lines):
            yield line_number, document


def _decoded_lines(stream, stats: ReadStats) -> Iterator[str]:
    for line_number, raw in enumerate(stream, start=1):
        stats.bytes_in += len(raw)
        text, replaced = decode_line(raw)
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
