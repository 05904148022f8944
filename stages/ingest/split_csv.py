"""Where a piece of a CSV file may start: at a line that begins a record. A quoted cell
may hold line breaks, so whether a line begins a record depends on every quote before it.

The reader (records.py: csv.reader, strict, quotechar '"', doubled quotes, the source's
delimiter, fed each line without its ending plus "\\n") is a finite-state machine, and
between two lines it is in one of three states: at the start of a record (RECORD),
inside a quoted cell (QUOTED), or failed (ERROR: the reader raised, and the stage stops
there whatever follows). So a task scanning one byte range of the file can run its
lines from both live states without knowing what came before, and report for each the
state after its last line and its first line that begins a record; chaining the ranges
in file order (split_plan.py) then gives the true state at each range and where the
pieces may start, with no quoting rule assumed about the data. This is the speculative
distributed CSV parsing of Ge et al. (SIGMOD 2019), exact here because the states at a
line break are only these three. The steps inside a line are CPython's
(Modules/_csv.c, parse_process_char) for this dialect.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

RECORD, QUOTED, ERROR = "record", "quoted", "error"

# The reader's states inside a line, and the classes of characters it tells apart.
_START_RECORD, _START_FIELD, _IN_FIELD, _IN_QUOTED, _QUOTE_IN_QUOTED, _EAT_CRNL, _FAILED = \
    range(7)
_QUOTE, _DELIMITER, _NEWLINE, _OTHER, _END_OF_LINE = range(5)

# _NEXT[state][character class]; _FAILED is where the strict reader raises csv.Error.
_NEXT = {
    _START_RECORD: {_QUOTE: _IN_QUOTED, _DELIMITER: _START_FIELD, _NEWLINE: _EAT_CRNL,
                    _OTHER: _IN_FIELD, _END_OF_LINE: _START_RECORD},
    _START_FIELD: {_QUOTE: _IN_QUOTED, _DELIMITER: _START_FIELD, _NEWLINE: _EAT_CRNL,
                   _OTHER: _IN_FIELD, _END_OF_LINE: _START_RECORD},
    _IN_FIELD: {_QUOTE: _IN_FIELD, _DELIMITER: _START_FIELD, _NEWLINE: _EAT_CRNL,
                _OTHER: _IN_FIELD, _END_OF_LINE: _START_RECORD},
    _IN_QUOTED: {_QUOTE: _QUOTE_IN_QUOTED, _DELIMITER: _IN_QUOTED, _NEWLINE: _IN_QUOTED,
                 _OTHER: _IN_QUOTED, _END_OF_LINE: _IN_QUOTED},
    _QUOTE_IN_QUOTED: {_QUOTE: _IN_QUOTED, _DELIMITER: _START_FIELD, _NEWLINE: _EAT_CRNL,
                       _OTHER: _FAILED, _END_OF_LINE: _START_RECORD},
    _EAT_CRNL: {_QUOTE: _FAILED, _DELIMITER: _FAILED, _NEWLINE: _EAT_CRNL, _OTHER: _FAILED,
                _END_OF_LINE: _START_RECORD},
}
_BETWEEN_LINES = {_START_RECORD: RECORD, _IN_QUOTED: QUOTED}
_UTF8_BOM = b"\xef\xbb\xbf"


def splittable_delimiter(delimiter: str) -> bool:
    """A one-byte delimiter that is neither the quote nor a line break: then its byte
    in the raw file is exactly the character the reader sees (UTF-8 never puts an ASCII
    byte inside a multi-byte character, and invalid bytes decode to U+FFFD, not to it)."""
    return delimiter.isascii() and delimiter not in '"\r\n'


def scan_lines(lines: Sequence[bytes], delimiter: str,
               starts_file: bool) -> dict[str, tuple[str, int | None]]:
    """For each state the lines may begin in (RECORD, QUOTED): (the state after the last
    line, the index of the first line that begins a record, or None). `lines` are raw,
    without "\\n"; `starts_file`: the first is the file's first line (its BOM is dropped
    by the reader)."""
    special = re.compile(b'["\r' + re.escape(delimiter.encode()) + b"]")
    classes = {ord('"'): _QUOTE, ord("\r"): _NEWLINE, ord(delimiter): _DELIMITER}
    out = {}
    for entry in (RECORD, QUOTED):
        state, first_record = entry, None
        for index, raw in enumerate(lines):
            if state == RECORD and first_record is None:
                first_record = index
            if state == ERROR:
                break
            content = raw.rstrip(b"\r\n")  # as decode_line strips the line ending
            if starts_file and index == 0:
                content = content.removeprefix(_UTF8_BOM)
            state = _after_line(content, state, special, classes)
        out[entry] = (state, first_record)
    return out


def _after_line(content: bytes, state: str, special: re.Pattern, classes: dict) -> str:
    # Fast paths, the common lines: without a quote nothing changes inside quotes, and
    # without a quote or a stray CR an unquoted line is one whole record.
    if state == QUOTED and b'"' not in content:
        return QUOTED
    if state == RECORD and b'"' not in content and b"\r" not in content:
        return RECORD
    inner = _IN_QUOTED if state == QUOTED else _START_RECORD
    position = 0
    for match in special.finditer(content):
        if match.start() > position:  # a run of other characters acts as its first one
            inner = _NEXT[inner][_OTHER]
            if inner == _FAILED:
                return ERROR
        inner = _NEXT[inner][classes[content[match.start()]]]
        if inner == _FAILED:
            return ERROR
        position = match.end()
    if len(content) > position:
        inner = _NEXT[inner][_OTHER]
        if inner == _FAILED:
            return ERROR
    # The reader is fed the line with "\n", then ends the line: a line break never
    # fails, and after it the reader is at a record start or inside quotes.
    return _BETWEEN_LINES[_NEXT[_NEXT[inner][_NEWLINE]][_END_OF_LINE]]
