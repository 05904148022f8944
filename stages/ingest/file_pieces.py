"""A piece of a source file: what one clean task reads when a large file is split.

A file larger than ingest.block_size_mb is read by several tasks (split_plan.py decides
where to cut it). A piece is a byte range that starts where reading can begin afresh (a
line start for JSONL, a record start for CSV, a paragraph start for text) or a run of
row groups (Parquet), and it knows the line (row) of the whole file it starts at, so that
document ids, `source_line` and error messages name the file's true lines. A file that
is not split is read as one piece, WHOLE_FILE, exactly as before splitting existed.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GutenbergCut:
    """Project Gutenberg's licence header and footer as lines of the whole file, found
    before the pieces are read (split_plan.py), so that every piece strips exactly the
    lines the unsplit read strips, even when START and END fall in other pieces."""

    header_last_line: int          # lines 1..this are the header (0: none)
    footer_first_line: int | None  # this line and all after it are the footer (None: none)


@dataclass(frozen=True)
class FilePiece:
    index: int = 0
    num_pieces: int = 1
    start: int = 0             # first byte (JSONL, CSV, text)
    end: int | None = None     # the byte after the last; None: to the end of the file
    first_line: int = 1        # the line (Parquet: row) of the whole file it starts at
    row_groups: tuple[int, ...] | None = None  # Parquet: the row groups; None: all
    gutenberg: GutenbergCut | None = None      # a split text file with strip_gutenberg

    @property
    def whole_file(self) -> bool:
        return self.num_pieces == 1

    @property
    def line_offset(self) -> int:
        """Add to a line counted from 1 within the piece to get the file's line."""
        return self.first_line - 1


WHOLE_FILE = FilePiece()
