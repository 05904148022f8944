"""One task per byte range of a large file, before the file is cleaned in pieces: where in
the range a piece may start, how many lines start in it, and where Project Gutenberg's
markers are (split_plan.py chains the ranges in file order).

A range [start, end) owns the lines that start in it; the first range also owns line 1.
Byte b starts a line when b == 0 or byte b-1 is "\\n" (and b is not the end of the
file), as a binary readline cuts them. Where a piece may start, by rule:
    line       any line (JSONL; text split by line)
    paragraph  a line after a blank line (text split by paragraph: blank lines end
               paragraphs, so no paragraph spans two pieces)
    csv        a line where a record begins (split_csv.py), given the state the reader
               is in at the range's first line, for each state it could be in
Each range reports one such place, its first: the pieces are about a range long. A
range reads its own bytes (and, for csv and markers, the rest of its last line), so a
file is read about once however it is cut; a file that is one huge line is one piece.
"""

from __future__ import annotations

from dataclasses import dataclass

import fsspec

# The paragraph reader's own test for a blank line: a cut must agree with it exactly.
from stages.ingest.clean import _is_blank as is_blank_line
from stages.ingest.clean import decode_line
from stages.ingest.sources import GUTENBERG_END, GUTENBERG_HEADER_MAX_LINES, GUTENBERG_START
from stages.ingest.split_csv import QUOTED, RECORD, scan_lines

ANY_LINE = "line"  # the one entry state of the rules other than csv
_READ_MORE = 1 << 20  # bytes read at a time to finish the range's last line


@dataclass(frozen=True)
class RangeJob:
    url: str
    start: int
    end: int
    rule: str               # line | paragraph | csv
    invalid_utf8: str       # decodes lines as the reader does, for blank lines and markers
    csv_delimiter: str = ","
    find_gutenberg: bool = False


@dataclass(frozen=True)
class Transfer:
    """From one state at the range's first line: the state after its last line, and its
    first line (index within the range, and byte) where a piece may start."""

    exit_state: str
    cut_line: int | None = None
    cut_byte: int | None = None


@dataclass(frozen=True)
class RangeScan:
    num_lines: int                   # lines that start in the range
    transfers: dict[str, Transfer]   # entry state -> Transfer
    gutenberg_start: int | None = None   # index of its first START line, if under the max
    gutenberg_ends: tuple[int, ...] = ()  # indices of END lines (see _gutenberg_markers)


def scan_range(job: RangeJob) -> RangeScan | None:
    """None where the range cannot be read: the file is then cleaned whole, and that task
    reports the read error as for any file (on_error decides)."""
    try:
        return _scan_range(job)
    except AssertionError:
        raise  # ours, not the file's
    except Exception:  # noqa: BLE001 - any read failure falls back to the unsplit read
        return None


def _scan_range(job: RangeJob) -> RangeScan:
    read_from = max(job.start - 1, 0)  # the byte before `start` says if `start` starts a line
    with fsspec.open(job.url, "rb") as stream:
        stream.seek(read_from)
        data = stream.read(job.end - read_from)
        if job.start == 0:
            first = 0
        else:
            newline = data.find(b"\n")
            first = read_from + newline + 1 if newline >= 0 else job.end
        if first >= job.end:  # inside a line that started before the range
            return RangeScan(0, {state: Transfer(state) for state in (ANY_LINE, RECORD, QUOTED)})
        # Line starts in [first, end): `first`, and one after each "\n" before end - 1.
        num_lines = 1 + data.count(b"\n", first - read_from, job.end - 1 - read_from)
        whole_lines = job.rule == "csv" or job.find_gutenberg
        if whole_lines and not data.endswith(b"\n"):
            data += _rest_of_line(stream)
    owned = data[first - read_from:]
    del data  # a scan holds about one block at a time (csv: two, with its lines)
    if job.rule == "csv":
        transfers = _csv_transfers(owned, first, job, num_lines)
    else:
        transfers = {ANY_LINE: _line_transfer(owned, first, job)}
    start_line, end_lines = (_gutenberg_markers(owned, first == 0, job.invalid_utf8)
                             if job.find_gutenberg else (None, ()))
    return RangeScan(num_lines, transfers, start_line, end_lines)


def _rest_of_line(stream) -> bytes:
    rest = bytearray()
    while chunk := stream.read(_READ_MORE):
        newline = chunk.find(b"\n")
        if newline >= 0:
            return bytes(rest + chunk[:newline + 1])
        rest += chunk
    return bytes(rest)


def _line_transfer(owned: bytes, first: int, job: RangeJob) -> Transfer:
    if job.rule == "line":
        return Transfer(ANY_LINE, 0, first)
    limit = job.end - first  # a piece must start inside the range
    position, index = 0, 0
    while (newline := owned.find(b"\n", position, limit)) >= 0:
        index += 1
        if newline + 1 >= limit:
            break
        if _is_blank(owned[position:newline + 1], job.invalid_utf8):
            return Transfer(ANY_LINE, index, first + newline + 1)
        position = newline + 1
    return Transfer(ANY_LINE)


def _is_blank(raw: bytes, invalid_utf8: str) -> bool:
    if not raw.strip():  # ASCII whitespace only: the common blank line, decoded or not
        return True
    return is_blank_line(decode_line(raw, keep_invalid=invalid_utf8 == "skip")[0])


def _csv_transfers(owned: bytes, first: int, job: RangeJob,
                   num_lines: int) -> dict[str, Transfer]:
    lines = owned.split(b"\n")
    if owned.endswith(b"\n"):
        lines.pop()
    assert len(lines) == num_lines, (len(lines), num_lines)
    transfers = {}
    for entry, (exit_state, cut_line) in scan_lines(lines, job.csv_delimiter,
                                                    first == 0).items():
        cut_byte = (first + sum(len(line) + 1 for line in lines[:cut_line])
                    if cut_line is not None else None)
        transfers[entry] = Transfer(exit_state, cut_line, cut_byte)
    return transfers


def _gutenberg_markers(owned: bytes, starts_file: bool,
                       invalid_utf8: str) -> tuple[int | None, tuple[int, ...]]:
    """(index of the first START line, indices of END lines) among the range's lines.
    Only START lines at an index under GUTENBERG_HEADER_MAX_LINES can be among the file's
    first that many lines; END lines under that index and the first one past it are
    enough to find the first END after any line up to that number. Both markers start
    with "***" after optional spaces, so only lines holding b"***" are decoded."""
    start_line, end_lines = None, []
    position = index = counted_to = 0
    while (found := owned.find(b"***", position)) >= 0:
        begin = owned.rfind(b"\n", 0, found) + 1
        stop = owned.find(b"\n", found)
        stop = len(owned) if stop < 0 else stop
        position = stop + 1  # the next line: one marker test per line
        index += owned.count(b"\n", counted_to, begin)
        counted_to = begin
        text = decode_line(owned[begin:stop], keep_invalid=invalid_utf8 == "skip")[0]
        if starts_file and begin == 0:
            text = text.removeprefix("\ufeff")
        if start_line is None and index < GUTENBERG_HEADER_MAX_LINES \
                and GUTENBERG_START.match(text):
            start_line = index
        elif GUTENBERG_END.match(text):
            end_lines.append(index)
            if index >= GUTENBERG_HEADER_MAX_LINES:
                break
    return start_line, tuple(end_lines)
