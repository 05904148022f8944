"""Plain-text files read line by line, side by side: parallel text for translation.

    test: {path: mt/wmt14/newstest2014.en, format: lines, field: en,
           aligned: {de: newstest2014.de}}      # rows {"en": line i of .en, "de": line i of .de}

`aligned` paths are relative to the folder of `path` (parallel files sit together). Lines
are split at "\\n" only and kept whole, blank ones too (a blank line is still a segment:
dropping it would shift every later pair), with the line end stripped as sacreBLEU's
reader strips it. A missing aligned file, or one whose line count differs, is an error
naming both files and both counts.
"""

from __future__ import annotations

from pathlib import Path


class AlignedFilesError(ValueError):
    """An aligned file is missing or does not pair line by line; names both files."""


def read_lines_file(path: Path) -> list[str]:
    with open(path, encoding="utf-8", newline="\n") as f:
        return [line.rstrip() for line in f]


def read_aligned_lines(path: Path, file, key: str) -> tuple[list[dict], list[str]]:
    """Reader of format: lines (stages.evaluate.readers signature)."""
    columns = {file.field: read_lines_file(path)}
    for field, name in (file.aligned or {}).items():
        other = path.parent / name
        if not other.is_file():
            raise AlignedFilesError(f"{other}: not found ('{key}.aligned.{field}', read beside {path}); "
                                f"aligned files are named relative to the folder of '{key}.path'")
        lines = read_lines_file(other)
        if len(lines) != len(columns[file.field]):
            raise AlignedFilesError(f"{path} has {len(columns[file.field])} lines but {other} has {len(lines)} "
                                f"('{key}.aligned.{field}'); parallel files pair line by line")
        columns[field] = lines
    fields = list(columns)
    rows = [dict(zip(fields, values)) for values in zip(*columns.values())]
    return rows, [f"{path}:{n}" for n in range(1, len(rows) + 1)]
