"""Corpus sources: config paths -> sorted file lists; text files -> clean documents.

Files are opened through fsspec, so a source can be a local path, a glob, or a URL
(s3://, gs://, https://) where the matching fsspec backend is installed; compressed
files (.gz, .bz2, .zst) are decompressed on the fly. Every file is read line by line:
memory stays flat whatever the file size. The record formats (JSONL, CSV, Parquet,
Hugging Face datasets) are read by records.py on top of what is here. A file larger than
ingest.block_size_mb may be read in pieces (file_pieces.py), each from its own byte
range; lines keep the numbers they have in the whole file.
"""

from __future__ import annotations

import contextlib
import io
import os
import posixpath
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import fsspec

from stages.ingest.clean import decode_line, split_documents
from stages.ingest.config import SourceConfig
from stages.ingest.file_pieces import WHOLE_FILE, FilePiece, GutenbergCut
from storage.urls import is_url

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
    hf_hub: bool = False  # format huggingface: a Hub name, not a save_to_disk directory
    size: int | None = None  # bytes, as listed (split_plan.py: no second request per file)


@dataclass
class ReadStats:
    bytes_in: int = 0    # bytes read (Parquet, datasets: UTF-8 bytes of the text field)
    lines_read: int = 0  # lines (Parquet, datasets: rows) read so far
    invalid_utf8_replaced: int = 0
    skipped_records: int = 0
    gutenberg_lines_stripped: int = 0
    nul_bytes_removed: int = 0  # NUL characters cleaning removed from the text


class RecordError(ValueError):
    """A bad line or record; the message names file and line and what to do."""


# "*** START OF THE PROJECT GUTENBERG EBOOK THE DUNWICH HORROR ***" (also THIS, and older
# "***START OF THE PROJECT GUTENBERG EBOOK"); the END line opens the licence footer.
GUTENBERG_START = re.compile(r"^\s*\*\*\*\s*START OF TH(?:E|IS) PROJECT GUTENBERG EBOOK", re.I)
GUTENBERG_END = re.compile(r"^\s*\*\*\*\s*END OF TH(?:E|IS) PROJECT GUTENBERG EBOOK", re.I)
GUTENBERG_HEADER_MAX_LINES = 2000  # the START line comes within the first few hundred


def resolve_sources(sources: list[SourceConfig], data_dir: Path) -> list[SourceFile]:
    """Every file the sources name: sources in config order, files sorted within a source.
    A file named by two sources is read once, by the first."""
    files: list[SourceFile] = []
    seen: set[str] = set()
    for index, source in enumerate(sources):
        config_key = f"ingest.sources[{index}]"
        pattern, relative = _absolute(source.path, data_dir)
        fs, fs_pattern = fsspec.core.url_to_fs(pattern)
        if source.format == "huggingface":
            hf = _huggingface_source(source, config_key, fs, fs_pattern, data_dir, relative)
            if hf.url not in seen:
                seen.add(hf.url)
                files.append(hf)
            continue
        matches = _list_files(fs, fs_pattern)
        if not matches:
            raise FileNotFoundError(
                f"{config_key}.path = {source.path!r} matched no files (resolved to {pattern}"
                f"{f', relative to data_dir {data_dir}' if relative else ''}); check the path "
                f"and glob, or point the experiment's data_dir (DATA_DIR) at the folder "
                f"that holds it")
        for match, size in matches:
            url = match if _is_local(fs) else fs.unstrip_protocol(match)
            if url in seen:
                continue
            seen.add(url)
            name = Path(os.path.relpath(match, data_dir)).as_posix() if relative else url
            files.append(SourceFile(url, name, config_key, source, size=size))
    return files


def _huggingface_source(source: SourceConfig, config_key: str, fs, fs_path: str,
                        data_dir: Path, relative: bool) -> SourceFile:
    """A save_to_disk directory where the path names one, else a Hub dataset name."""
    if fs.isdir(fs_path):
        url = fs_path if _is_local(fs) else fs.unstrip_protocol(fs_path)
        name = Path(os.path.relpath(fs_path, data_dir)).as_posix() if relative else url
        return SourceFile(url, name, config_key, source)
    if not relative:
        raise FileNotFoundError(
            f"{config_key}.path = {source.path!r} is not a directory; for format "
            f"'huggingface' give a datasets.save_to_disk directory or a Hub dataset name")
    # "wikitext:wikitext-103-raw-v1:train": ids and the source column say which split.
    name = ":".join(part for part in (source.path, source.hf_config_name, source.hf_split)
                    if part)
    return SourceFile(name, name, config_key, source, hf_hub=True)


@dataclass(frozen=True)
class ReadOptions:
    normalization: str = "NFC"
    unwrap_lines: bool = True
    invalid_utf8: str = "replace"  # replace | skip | fail
    on_error: str = "fail"         # fail | skip
    strip_gutenberg: bool = False


def text_documents(file: SourceFile, options: ReadOptions, stats: ReadStats,
                   piece: FilePiece = WHOLE_FILE) -> Iterator[tuple[int, str]]:
    """(1-based line where the document starts, clean text) for every document of a text
    file (or of one piece of it), split as its source says."""
    with open_lines(file.url, piece) as stream:
        lines = decoded_lines(stream, file, options.invalid_utf8, stats, piece.first_line)
        if options.strip_gutenberg:
            lines = (_strip_gutenberg(lines, stats) if piece.gutenberg is None
                     else _cut_gutenberg(lines, piece.gutenberg, piece.first_line, stats))
        lines = counting_nul(lines, stats)
        for line, text in split_documents(lines, file.source.split, options.normalization,
                                          options.unwrap_lines):
            yield piece.line_offset + line, text


@contextlib.contextmanager
def open_lines(url: str, piece: FilePiece = WHOLE_FILE) -> Iterator[Iterator[bytes]]:
    """The raw lines of a file (open_compressed), or of one piece of it: a piece is never
    compressed (a compressed stream cannot start at a byte offset), and its byte range
    starts at a line start and ends at one (or at the end of the file)."""
    if piece.whole_file:
        with open_compressed(url) as stream:
            yield stream
        return
    with fsspec.open(url, "rb") as stream:
        yield _lines_between(stream, piece.start, piece.end)


def _lines_between(stream, start: int, end: int | None) -> Iterator[bytes]:
    stream.seek(start)
    position = start
    for line in stream:
        if end is not None and position >= end:
            return
        position += len(line)
        yield line


@contextlib.contextmanager
def open_compressed(url: str) -> Iterator[io.IOBase]:
    """A binary stream of the file's bytes, decompressed by its extension, that iterates
    by line."""
    with fsspec.open(url, "rb", compression="infer") as stream:
        if fsspec.utils.infer_compression(url) == "zstd":
            # zstandard's reader has no readline (iterating raises UnsupportedOperation).
            yield io.BufferedReader(stream, buffer_size=1 << 20)
        else:
            yield stream


def counting_nul(texts: Iterator[str], stats: ReadStats) -> Iterator[str]:
    """The texts unchanged, counting their NUL characters, which cleaning removes (a NUL
    in text is a sign of a binary or damaged file: the count tells the user it happened)."""
    for text in texts:
        if "\x00" in text:
            stats.nul_bytes_removed += text.count("\x00")
        yield text


def _strip_gutenberg(lines: Iterator[str], stats: ReadStats) -> Iterator[str]:
    """Blank out the lines up to and including the START marker (blank, not dropped, so
    line numbers stay true) and drop the END marker and every line after it. Only the first
    GUTENBERG_HEADER_MAX_LINES lines are held back while looking for START; without a
    START among them, END still counts after them (not in a shorter file). The pieces of
    a split file follow the same rules through gutenberg_cut (split_plan.py)."""
    held: list[str] = []
    for line in lines:
        held.append(line)
        if GUTENBERG_START.match(line):
            stats.gutenberg_lines_stripped += len(held)
            yield from [""] * len(held)
            break
        if len(held) >= GUTENBERG_HEADER_MAX_LINES:
            yield from held
            break
    else:
        yield from held  # a short file without a START line: kept whole
        return
    for line in lines:
        if GUTENBERG_END.match(line):
            stats.gutenberg_lines_stripped += 1 + sum(1 for _ in lines)
            return
        yield line


def _cut_gutenberg(lines: Iterator[str], cut: GutenbergCut, first_line: int,
                   stats: ReadStats) -> Iterator[str]:
    """_strip_gutenberg for one piece of a file whose markers were found beforehand: the
    header lines blanked, the footer lines read (their bytes count, as unsplit) but
    dropped."""
    footer = cut.footer_first_line
    for line_number, line in enumerate(lines, start=first_line):
        if footer is not None and line_number >= footer:
            stats.gutenberg_lines_stripped += 1
        elif line_number <= cut.header_last_line:
            stats.gutenberg_lines_stripped += 1
            yield ""
        else:
            yield line


def decoded_lines(stream, file: SourceFile, invalid_utf8: str, stats: ReadStats,
                  first_line: int = 1) -> Iterator[str]:
    """The file's lines, decoded by the invalid_utf8 policy, without line endings;
    `first_line`: the number of the stream's first line in the file (a piece's)."""
    for line_number, raw in enumerate(stream, start=first_line):
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
    if is_url(path) or os.path.isabs(os.path.expanduser(path)):
        return os.path.expanduser(path), False
    return str(data_dir / path), True


def _list_files(fs, pattern: str) -> list[tuple[str, int | None]]:
    """(path, size in bytes) of every file the pattern names, sorted by path."""
    if _GLOB_CHARS & set(pattern):
        found = fs.glob(pattern, detail=True)
    elif fs.isdir(pattern):
        # Skip hidden files and folders (.git, .DS_Store) under a directory source.
        found = {path: info for path, info in fs.find(pattern, detail=True).items()
                 if not any(part.startswith(".")
                            for part in posixpath.relpath(path, pattern).split("/"))}
    else:
        try:
            found = {pattern: fs.info(pattern)}
        except Exception:  # noqa: BLE001 - as fs.isfile: no such file, or not reachable
            return []
    return sorted((path, info.get("size")) for path, info in found.items()
                  if info["type"] == "file")


def _is_local(fs) -> bool:
    return "file" in (fs.protocol if isinstance(fs.protocol, tuple) else (fs.protocol,))
