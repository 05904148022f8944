"""Which files are cleaned in pieces, and where the pieces start (issue 19: one 50 GB
JSONL was one task).

A file larger than ingest.block_size_mb is cut into ranges of that size; one task per
range (split_scan.py, run by the same map as the cleaning: Ray Data or this process)
reports where in it a piece may start and how many lines start in it; chaining the
ranges in file order gives each piece its byte range and the file line it starts at,
the CSV reader's state at each range (split_csv.py), and the lines of Gutenberg's
licence header and footer. Parquet files are cut at row groups, from their footer.

Read whole, as before: compressed files (.gz, .bz2, .zst: a compressed stream cannot
start at a byte offset without reading all before it), text with split 'file' (the
file is one document), Hugging Face datasets, CSV with a delimiter that is not one
ASCII byte, and any file whose size, footer or ranges cannot be read (its clean task
then reports the error, as for any file).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path

import fsspec
import pyarrow.parquet as pq

from stages.ingest.config import IngestConfig
from stages.ingest.file_pieces import WHOLE_FILE, FilePiece, GutenbergCut
from stages.ingest.sources import GUTENBERG_HEADER_MAX_LINES, SourceFile
from stages.ingest.split_csv import ERROR, RECORD, splittable_delimiter
from stages.ingest.split_scan import ANY_LINE, RangeJob, RangeScan, scan_range
from stages.ingest.staging import CleanJob
from storage.urls import is_url

Map = Callable[..., list]  # map_in_order or map_tasks


def clean_jobs(files: list[SourceFile], config: IngestConfig, staging_dir: Path,
               map_fn: Map) -> list[CleanJob]:
    """One job per file, or per piece of a file that is split, in corpus order."""
    jobs = []
    for index, (file, pieces) in enumerate(zip(files, plan_pieces(files, config, map_fn),
                                               strict=True)):
        for piece in pieces:
            name = (f"file-{index:06d}.parquet" if piece.whole_file
                    else f"file-{index:06d}-piece-{piece.index:05d}.parquet")
            jobs.append(CleanJob(file, str(staging_dir / name), config, piece))
    return jobs


def plan_pieces(files: list[SourceFile], config: IngestConfig,
                map_fn: Map) -> list[tuple[FilePiece, ...]]:
    """Per file, its pieces in order ((WHOLE_FILE,) for a file read by one task)."""
    pieces: list[tuple[FilePiece, ...]] = [(WHOLE_FILE,)] * len(files)
    if not config.block_size_mb:
        return pieces
    block = max(1, int(config.block_size_mb * 2**20))
    range_jobs: list[RangeJob] = []
    owners: list[int] = []
    for index, file in enumerate(files):
        rule = split_rule(file)
        size = (file.size if file.size is not None else _size(file.url)) if rule else None
        if size is None or size <= block:
            continue
        if rule == "parquet":
            pieces[index] = parquet_pieces(file.url, block)
            continue
        for start in range(0, size, block):
            range_jobs.append(RangeJob(
                file.url, start, min(start + block, size), rule, config.invalid_utf8,
                file.source.csv_delimiter, _strips_gutenberg(file, config)))
            owners.append(index)
    if not range_jobs:
        return pieces
    scans = map_fn(scan_range, range_jobs, desc="ingest: find where to split large files")
    by_file: dict[int, list[RangeScan | None]] = {}
    for owner, scan in zip(owners, scans, strict=True):
        by_file.setdefault(owner, []).append(scan)
    for index, file_scans in by_file.items():
        if all(scan is not None for scan in file_scans):
            pieces[index] = pieces_from_scans(file_scans, files[index].source.format == "csv",
                                              _strips_gutenberg(files[index], config))
    return pieces


def _strips_gutenberg(file: SourceFile, config: IngestConfig) -> bool:
    return config.strip_gutenberg and file.source.format == "text"


def split_rule(file: SourceFile) -> str | None:
    """How a file may be cut (split_scan.py's rules, or parquet), or None: read whole."""
    source = file.source
    if fsspec.utils.infer_compression(file.url) is not None:
        return None
    if source.format == "jsonl":
        return "line"
    if source.format == "csv":
        return "csv" if splittable_delimiter(source.csv_delimiter) else None
    if source.format == "parquet":
        return "parquet"
    if source.format == "text" and source.split in ("paragraph", "line"):
        return source.split
    return None


def pieces_from_scans(scans: Sequence[RangeScan], is_csv: bool,
                      strip_gutenberg: bool) -> tuple[FilePiece, ...]:
    state = RECORD if is_csv else ANY_LINE
    cuts = [(0, 1)]  # (first byte, first line) of each piece
    lines_before = 0
    for index, scan in enumerate(scans):
        if state == ERROR:
            break  # the reader fails in the piece before: nothing after it is read
        transfer = scan.transfers[state]
        if index > 0 and transfer.cut_line is not None:
            cuts.append((transfer.cut_byte, lines_before + 1 + transfer.cut_line))
        lines_before += scan.num_lines
        state = transfer.exit_state
    if len(cuts) == 1:
        return (WHOLE_FILE,)
    cut = gutenberg_cut(scans) if strip_gutenberg else None
    ends = [start for start, _ in cuts[1:]] + [None]
    return tuple(FilePiece(index, len(cuts), start, end, first_line, gutenberg=cut)
                 for index, ((start, first_line), end) in enumerate(zip(cuts, ends,
                                                                        strict=True)))


def gutenberg_cut(scans: Sequence[RangeScan]) -> GutenbergCut:
    """The lines sources._strip_gutenberg strips when it reads the file whole: through the
    first START line if it is among the first GUTENBERG_HEADER_MAX_LINES lines, and from
    the first END line after it (or after those lines, if the file has that many)."""
    starts, ends, first_line = [], [], 1
    for scan in scans:
        if scan.gutenberg_start is not None:
            starts.append(first_line + scan.gutenberg_start)
        ends += [first_line + end for end in scan.gutenberg_ends]
        first_line += scan.num_lines
    num_lines = first_line - 1
    if starts and starts[0] <= GUTENBERG_HEADER_MAX_LINES:
        header, searched_from = starts[0], starts[0]
    elif num_lines >= GUTENBERG_HEADER_MAX_LINES:
        header, searched_from = 0, GUTENBERG_HEADER_MAX_LINES
    else:
        return GutenbergCut(0, None)  # a short file without START is kept whole
    footer = next((line for line in ends if line > searched_from), None)
    return GutenbergCut(header, footer)


def parquet_pieces(url: str, block: int) -> tuple[FilePiece, ...]:
    """Runs of whole row groups of about `block` compressed bytes each."""
    try:
        with fsspec.open(url, "rb") as stream:
            metadata = pq.ParquetFile(stream).metadata
    except Exception:  # noqa: BLE001 - its clean task reports what is wrong with it
        return (WHOLE_FILE,)
    groups: list[tuple[int, list[int]]] = []  # (first row, row groups)
    rows = size = 0
    for index in range(metadata.num_row_groups):
        if not groups or size >= block:
            groups.append((rows + 1, []))
            size = 0
        group = metadata.row_group(index)
        groups[-1][1].append(index)
        size += sum(group.column(c).total_compressed_size for c in range(group.num_columns))
        rows += group.num_rows
    if len(groups) <= 1:
        return (WHOLE_FILE,)
    return tuple(FilePiece(index, len(groups), first_line=first_row, row_groups=tuple(members))
                 for index, (first_row, members) in enumerate(groups))


def _size(url: str) -> int | None:
    try:
        if not is_url(url):
            return os.path.getsize(url)
        fs, path = fsspec.core.url_to_fs(url)
        return fs.size(path)
    except Exception:  # noqa: BLE001 - read whole: its clean task reports the error
        return None
