"""A corpus that yields no documents is an error; an empty file among others, a warning.

Without this, an empty corpus file made an empty ingest output that was committed as
done, and the error came one stage later, from the tokenizer, without naming the file.
What users expect: zero documents in the whole corpus (nothing read, or everything
filtered out) is a mistake in the config or the data and stops the stage, naming the
sources and their files; one empty file in a glob of a hundred is worth knowing but not
worth stopping for, so it is counted (`empty_files`) and named in a warning.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from stages.ingest.sources import SourceFile
from stages.ingest.staging import CleanedFile

_NAMED_FILES = 5  # files named per source in a message; the rest are counted


def empty_files(files: list[SourceFile], cleaned: list[CleanedFile]) -> list[SourceFile]:
    """Files that were read and held no document at all (empty, or only blank lines or
    markup); files skipped as unreadable (on_error: skip) are counted elsewhere."""
    return [file for file, result in zip(files, cleaned, strict=True)
            if result.documents_in == 0 and result.skipped_files == 0]


def check_some_documents_read(files: list[SourceFile], cleaned: list[CleanedFile]) -> None:
    """Raise ValueError naming every source and its files if the corpus held no document."""
    if any(result.documents_in for result in cleaned):
        return
    skipped = [file for file, result in zip(files, cleaned, strict=True) if result.skipped_files]
    lines = [f"{key}.path = {path!r}: {described}"
             for key, path, described in _by_source(files, skipped)]
    raise ValueError(
        "the corpus yielded no documents, so ingest would write an empty output:\n  "
        + "\n  ".join(lines)
        + "\ncheck that the files hold text (and, for jsonl / csv / parquet / huggingface "
        "sources, that text_field names the field with the text)")


def check_some_documents_kept(cleaned: list[CleanedFile], masks: list[np.ndarray],
                              min_chars: int) -> None:
    """Raise ValueError if the filters and deduplication removed every document read."""
    if any(mask.any() for mask in masks):
        return
    removed: dict[str, int] = defaultdict(int)
    for result in cleaned:
        for name, (documents, _) in result.removed.items():
            removed[name] += documents
    read = sum(result.documents_in for result in cleaned)
    by_filter = ", ".join(f"{name}: {count}" for name, count in sorted(removed.items()) if count)
    raise ValueError(
        f"every one of the {read} documents read was removed ({by_filter or 'duplicates'}), "
        f"so ingest would write an empty output; loosen the ingest filters that removed them "
        f"(ingest.min_chars is {min_chars}) or add text")


def empty_files_warning(files: list[SourceFile], empty: list[SourceFile]) -> str | None:
    if not empty:
        return None
    lines = [f"{key}.path = {path!r}: {described}" for key, path, described in _by_source(empty, [])]
    return (f"{len(empty)} of {len(files)} files held no documents (empty, or only blank "
            f"lines), counted as empty_files:\n  " + "\n  ".join(lines))


def _by_source(files: list[SourceFile], skipped: list[SourceFile]) -> list[tuple[str, str, str]]:
    """(config key, configured path, "2 files, empty: a.txt, b.txt") per source."""
    groups: dict[tuple[str, str], list[SourceFile]] = defaultdict(list)
    for file in files:
        groups[(file.config_key, file.source.path)].append(file)
    skipped_urls = {file.url for file in skipped}
    out = []
    for (key, path), members in groups.items():
        unread = [f for f in members if f.url in skipped_urls]
        empty = [f for f in members if f.url not in skipped_urls]
        parts = []
        if empty:
            parts.append(f"{_count(len(empty), 'file')} without documents: {_names(empty)}")
        if unread:
            parts.append(f"{_count(len(unread), 'file')} skipped as unreadable "
                         f"(ingest.on_error: skip): {_names(unread)}")
        out.append((key, path, "; ".join(parts)))
    return out


def _names(files: list[SourceFile]) -> str:
    names = ", ".join(file.name for file in files[:_NAMED_FILES])
    return names + (f" and {len(files) - _NAMED_FILES} more" if len(files) > _NAMED_FILES else "")


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"
