"""Read a sequence-to-sequence split: aligned plain-text files or JSONL, checked.

    rows = read_split(spec, "dev", data_dir)    # Seq2SeqRows: sources, references per row

Every mistake in the files is a Seq2SeqDataError naming the file(s) and the fix: a
missing file, parallel files of different lengths (both files, both counts), a JSONL
line that is not an object or lacks a field. Empty sources or targets follow the spec's
`empty_lines`: skipped and counted (`Seq2SeqRows.empty_skipped`), or refused naming the
first such line.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from stages.finetune.seq2seq.spec import Seq2SeqSpec, SplitFiles


class Seq2SeqDataError(ValueError):
    """A task file does not match its spec; the message names the file(s) and what to do."""


@dataclass
class Seq2SeqRows:
    """sources:      one text per example
    references:      per example, its reference texts (the first is trained on)
    line_numbers:    1-based line of each example in its file(s)
    empty_skipped:   pairs left out because their source or a reference was empty"""

    sources: list[str]
    references: list[list[str]]
    line_numbers: list[int] = field(default_factory=list)
    empty_skipped: int = 0

    def __len__(self) -> int:
        return len(self.sources)

    @property
    def targets(self) -> list[str]:
        return [refs[0] for refs in self.references]

    def subset(self, positions) -> "Seq2SeqRows":
        positions = [int(p) for p in positions]
        return Seq2SeqRows([self.sources[p] for p in positions], [self.references[p] for p in positions],
                           [self.line_numbers[p] for p in positions], self.empty_skipped)

    def sample(self, max_examples: int | None, seed: int) -> "Seq2SeqRows":
        """A seeded subset in file order (None = all)."""
        if max_examples is None or max_examples >= len(self):
            return self
        return self.subset(np.sort(np.random.default_rng(seed).choice(len(self), max_examples, replace=False)))


def read_split(spec: Seq2SeqSpec, split: str, data_dir: str | Path) -> Seq2SeqRows:
    files = spec.splits[split]
    for name in files.files():
        path = spec.data_path(data_dir, name)
        if not path.is_file():
            raise Seq2SeqDataError(
                f"{path}: not found (task {spec.name!r}, split {split!r}). {_where_named(spec, split)} names it "
                f"relative to data_dir {Path(data_dir)}: put the file there, or fix the path")
    sources, references, lines = (_read_plain(spec, files, data_dir) if files.path is None
                                  else _read_jsonl(spec, files, data_dir))
    return _without_empty(spec, split, files, data_dir, sources, references, lines)


def _where_named(spec: Seq2SeqSpec, split: str) -> str:
    return f"{spec.file}, splits.{split}," if spec.file else f"the built-in task's splits.{split}"


def _read_lines(path: Path) -> list[str]:
    # newline="\n": a file's own lines only (a stray \r or U+2028 inside a caption is text, not a break).
    with open(path, encoding="utf-8", newline="\n") as f:
        return [line.rstrip("\r\n") for line in f]


def _read_plain(spec: Seq2SeqSpec, files: SplitFiles, data_dir) -> tuple[list[str], list[list[str]], list[int]]:
    source_path, target_path = spec.data_path(data_dir, files.source), spec.data_path(data_dir, files.target)
    sources, targets = _read_lines(source_path), _read_lines(target_path)
    if len(sources) != len(targets):
        raise Seq2SeqDataError(
            f"{source_path} has {len(sources)} lines but {target_path} has {len(targets)}: parallel files need "
            "one example per line, line i of one the translation of line i of the other. Find the missing or "
            "extra line (a sentence split over two lines, a blank line at the end) and fix one of the files")
    return [s.strip() for s in sources], [[t.strip()] for t in targets], list(range(1, len(sources) + 1))


def _read_jsonl(spec: Seq2SeqSpec, files: SplitFiles, data_dir) -> tuple[list[str], list[list[str]], list[int]]:
    path = spec.data_path(data_dir, files.path)
    sources, references, lines = [], [], []
    for number, line in enumerate(_read_lines(path), start=1):
        if not line.strip():
            continue  # a blank line (usually the last) is no example
        try:
            row = json.loads(line)
        except json.JSONDecodeError as error:
            raise Seq2SeqDataError(f"{path}:{number}: not a JSON object ({error.msg}); JSONL needs one object per "
                                   "line") from None
        if not isinstance(row, dict):
            raise Seq2SeqDataError(f"{path}:{number}: a JSON {type(row).__name__}, not an object; JSONL needs one "
                                   "object per line")
        wanted = [files.source_field, *files.target_fields]
        missing = [name for name in wanted if name not in row]
        if missing:
            raise Seq2SeqDataError(f"{path}:{number}: no field {', '.join(map(repr, missing))} (it has "
                                   f"{', '.join(map(repr, row))}); fix source_field / target_fields in "
                                   f"{_where_named(spec, '...')} or the file")
        sources.append(str(row[files.source_field] or "").strip())
        references.append([str(row[name] or "").strip() for name in files.target_fields])
        lines.append(number)
    return sources, references, lines


def _without_empty(spec: Seq2SeqSpec, split: str, files: SplitFiles, data_dir, sources: list[str],
                   references: list[list[str]], lines: list[int]) -> Seq2SeqRows:
    empty = [i for i, (source, refs) in enumerate(zip(sources, references)) if not source or not all(refs)]
    if empty and spec.empty_lines == "error":
        first = empty[0]
        role = "source" if not sources[first] else "target"
        where = spec.data_path(data_dir, files.path or (files.source if role == "source" else files.target))
        raise Seq2SeqDataError(
            f"{where}:{lines[first]}: empty {role} (task {spec.name!r}, split {split!r}; {len(empty)} pairs have an "
            "empty source or target in all). Remove those pairs (from both files), or set empty_lines: skip in "
            "the spec to leave them out")
    dropped = set(empty)
    keep = [i for i in range(len(sources)) if i not in dropped]
    rows = Seq2SeqRows([sources[i] for i in keep], [references[i] for i in keep], [lines[i] for i in keep],
                       empty_skipped=len(empty))
    if not len(rows):
        raise Seq2SeqDataError(f"{', '.join(files.files())}: no examples (task {spec.name!r}, split {split!r}); "
                               "the file is empty or every pair is")
    return rows
