"""clm examples: a shard split's documents as one token stream, each document followed
by eos, cut into rows of exactly seq_len (RowWriter); document boundaries are the eos
tokens (the loader derives document ids from them)."""

from __future__ import annotations

import numpy as np

from stages.data.row_writer import RowWriter
from stages.objectives.base import WriterSpec


class ClmWriter:
    def __init__(self, spec: WriterSpec, path: str, max_rows: int | None):
        self.eos = spec.ids.eos
        self._rows = RowWriter(path, spec.seq_len, spec.dtype, max_rows)

    @property
    def full(self) -> bool:
        return self._rows.full

    def add(self, documents: list[list[int]]) -> int:
        stream = eos_joined(documents, self.eos)
        if stream:
            self._rows.add(np.array(stream, dtype=np.int64))
        return len(stream)

    def commit(self) -> int:
        return self._rows.commit()


def eos_joined(documents: list[list[int]], eos: int) -> list[int]:
    """The documents back to back, each followed by eos (clm and span streams)."""
    stream: list[int] = []
    for ids in documents:
        stream += ids
        stream.append(eos)
    return stream
