"""The pieces of a split file, after cleaning, as the file read whole would have been.

Most of ingest takes the pieces as they come: in order they hold the file's documents
in the file's order, and their counts add up to the file's (dedup, shards, metrics per
source). Two rules are per file, and these functions restore them:
- on_error 'skip' skips a file whole when it cannot be read: the unsplit read stops at
  the failure and keeps nothing of the file, so if one piece failed, every piece of the
  file is staged again, empty (counting the bytes read up to the failure, as unsplit);
- what counts files (empty_files, the empty-corpus error) sees one result per file.
Known difference: under on_error 'skip', when a piece fails to read and a later piece
holds an error that stops the stage whatever on_error says (invalid_utf8 'fail', broken
CSV quoting), the stage stops; the unsplit read would have skipped the file before
reaching that error.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from stages.ingest.staging import CleanedFile, CleanJob


def restage_unreadable(jobs: list[CleanJob], cleaned: list[CleanedFile]) -> dict[int, CleanJob]:
    """Job index -> the job that stages that piece empty, for every piece of each split
    file that a piece of could not be read (on_error 'skip')."""
    redo: dict[int, CleanJob] = {}
    for members in _files(jobs):
        results = [cleaned[i] for i in members]
        failed = next((k for k, r in enumerate(results) if r.skipped_files), None)
        if failed is None or len(members) == 1:
            continue
        bytes_read = sum(r.bytes_in for r in results[:failed + 1])
        for k, i in enumerate(members):
            redo[i] = dataclasses.replace(jobs[i], unreadable_file_bytes=bytes_read if k == 0
                                          else 0)
    return redo


def whole_files(jobs: list[CleanJob], cleaned: list[CleanedFile]) -> list[CleanedFile]:
    """One result per source file: a split file's pieces added up. The staging paths of
    a combined result are its first piece's; read the pieces' own to get documents."""
    return [cleaned[members[0]] if len(members) == 1
            else _combined([cleaned[i] for i in members]) for members in _files(jobs)]


def _files(jobs: list[CleanJob]) -> list[list[int]]:
    """Job indices grouped by file, in order (a file's pieces are consecutive jobs)."""
    groups: list[list[int]] = []
    for i, job in enumerate(jobs):
        if job.piece.index == 0:
            groups.append([])
        groups[-1].append(i)
    return groups


def _combined(results: list[CleanedFile]) -> CleanedFile:
    values = {}
    for field in dataclasses.fields(results[0]):
        parts = [getattr(result, field.name) for result in results]
        if isinstance(parts[0], int):
            values[field.name] = sum(parts)
        elif isinstance(parts[0], bytes):
            values[field.name] = b"".join(parts)
        elif isinstance(parts[0], np.ndarray):
            values[field.name] = np.concatenate(parts)
        elif isinstance(parts[0], dict):  # filter name -> [documents, bytes]
            totals: dict = {}
            for part in parts:
                for name, counts in part.items():
                    totals[name] = [a + b for a, b in
                                    zip(totals.get(name, [0] * len(counts)), counts, strict=True)]
            values[field.name] = totals
    return dataclasses.replace(results[0], **values)
