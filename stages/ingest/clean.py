"""Text cleaning: raw bytes in, clean documents out. Pure functions, no I/O.

Order matters: decode (invalid bytes -> U+FFFD, counted), drop control characters and
byte-order marks, normalize Unicode, then collapse whitespace inside each paragraph.
Lines are cut at b"\\n" before decoding; that is exact for UTF-8, whose multi-byte
sequences never contain the byte 0x0A, and it lets a file of any size stream.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Iterator
from typing import Literal

Split = Literal["paragraph", "line", "file"]

# Control characters (Unicode category Cc) that are not whitespace: NUL, escape codes,
# C1 controls. Whitespace controls (tab, CR, form feed, ...) become spaces when a
# paragraph's whitespace is collapsed instead. U+FEFF is a byte-order mark at the start
# of a file and an obsolete zero-width no-break space anywhere else: dropped everywhere.
# (Unicode's stability policy fixes Cc to U+0000-001F and U+007F-009F, hence range(0x100).)
_REMOVED = "".join(
    chr(c) for c in range(0x100) if unicodedata.category(chr(c)) == "Cc" and not chr(c).isspace()
) + "\ufeff"
_REMOVED_RE = re.compile(f"[{re.escape(_REMOVED)}]")

REPLACEMENT_CHARACTER = "\ufffd"


def decode_line(raw: bytes, keep_invalid: bool = False) -> tuple[str, int]:
    """UTF-8 bytes of one line -> (text without the line ending, invalid bytes replaced).

    `keep_invalid` keeps each invalid byte as a lone surrogate (U+DC80-U+DCFF) instead of
    U+FFFD, so that a filter can drop the documents that hold any."""
    try:
        text = raw.decode("utf-8")
        replaced = 0
    except UnicodeDecodeError:
        if keep_invalid:
            text = raw.decode("utf-8", errors="surrogateescape")
            return text.rstrip("\r\n"), sum(1 for c in text if "\udc80" <= c <= "\udcff")
        text = raw.decode("utf-8", errors="replace")
        # Every U+FFFD not already encoded in the input stands for invalid bytes.
        replaced = text.count(REPLACEMENT_CHARACTER) - raw.count(REPLACEMENT_CHARACTER.encode())
    return text.rstrip("\r\n"), replaced


def clean_paragraph(lines: list[str], normalization: str, unwrap_lines: bool) -> str:
    """The lines of one paragraph -> one clean string ('' if nothing is left).

    Runs of whitespace (spaces, tabs, stray CR, Unicode spaces) become one space; the
    line breaks become spaces too when `unwrap_lines`, else they stay as single "\\n".
    """
    text = "\n".join(lines)
    text = _REMOVED_RE.sub("", text)
    if not unicodedata.is_normalized(normalization, text):
        text = unicodedata.normalize(normalization, text)
    if unwrap_lines:
        return " ".join(text.split())
    return "\n".join(clean for line in text.split("\n") if (clean := " ".join(line.split())))


def split_documents(lines: Iterable[str], split: Split, normalization: str,
                    unwrap_lines: bool) -> Iterator[tuple[int, str]]:
    """Decoded lines of one file -> (1-based line where the document starts, clean text).

    paragraph: blocks separated by blank lines; line: every non-blank line; file: the whole
    file, its paragraphs joined by a blank line. Documents that clean to '' are skipped.
    """
    paragraphs = _paragraphs(lines, split)
    if split != "file":
        for start_line, paragraph in paragraphs:
            text = clean_paragraph(paragraph, normalization, unwrap_lines)
            if text:
                yield start_line, text
        return
    first_line, texts = 0, []
    for start_line, paragraph in paragraphs:
        if text := clean_paragraph(paragraph, normalization, unwrap_lines):
            first_line = first_line or start_line
            texts.append(text)
    if texts:
        yield first_line, "\n\n".join(texts)


def _paragraphs(lines: Iterable[str], split: Split) -> Iterator[tuple[int, list[str]]]:
    """Group lines into (start line, lines) blocks: one per line for `line`, blank-line
    separated blocks otherwise. A line of only whitespace (or control characters) is blank."""
    block: list[str] = []
    start_line = 0
    for line_number, line in enumerate(lines, start=1):
        blank = _is_blank(line)
        if split == "line":
            if not blank:
                yield line_number, [line]
            continue
        if blank:
            if block:
                yield start_line, block
                block = []
        else:
            if not block:
                start_line = line_number
            block.append(line)
    if block:
        yield start_line, block


def _is_blank(line: str) -> bool:
    stripped = line.strip()
    # The regex only runs on the rare line that holds control characters.
    return not stripped or (_REMOVED_RE.search(stripped) is not None
                            and not _REMOVED_RE.sub("", stripped).strip())
