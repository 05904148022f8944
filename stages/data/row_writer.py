"""A token stream -> fixed-length rows in one Arrow IPC shard file."""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa

from stages.data.packed import row_schema

ROWS_PER_RECORD_BATCH = 1024  # the loader maps one record batch at a time


class RowWriter:
    """Cuts an appended token stream into rows of exactly `seq_len` tokens and writes them
    in record batches of ROWS_PER_RECORD_BATCH rows, whatever sizes the tokens come in.

    Writes to `<path>.partial`; `commit()` drops the unfinished last row and renames the
    file, so a file with the final name is always complete. Stops taking tokens once it
    holds `max_rows` rows (`full`).
    """

    def __init__(self, path: str, seq_len: int, dtype: str, max_rows: int | None = None):
        self.path = path
        self.seq_len = seq_len
        self.dtype = np.dtype(dtype)
        self.max_rows = max_rows
        self.rows = 0
        self._schema = row_schema(seq_len, dtype)
        self._pending: list[np.ndarray] = []
        self._pending_tokens = 0
        self._partial_path = path + ".partial"
        self._writer = pa.ipc.new_file(self._partial_path, self._schema)

    @property
    def full(self) -> bool:
        return self.max_rows is not None and self.rows >= self.max_rows

    def add(self, tokens: np.ndarray) -> None:
        if self.full:
            return
        self._pending.append(tokens.astype(self.dtype, copy=False))
        self._pending_tokens += len(tokens)
        batch_tokens = ROWS_PER_RECORD_BATCH * self.seq_len
        while self._pending_tokens >= batch_tokens and not self.full:
            self._write_rows(ROWS_PER_RECORD_BATCH)

    def commit(self) -> int:
        """Write what is left in whole rows, close, rename; returns the number of rows."""
        while not self.full and self._pending_tokens >= self.seq_len:
            self._write_rows(min(ROWS_PER_RECORD_BATCH, self._pending_tokens // self.seq_len))
        self._writer.close()
        os.replace(self._partial_path, self.path)
        return self.rows

    def _write_rows(self, num_rows: int) -> None:
        if self.max_rows is not None:
            num_rows = min(num_rows, self.max_rows - self.rows)
        stream = np.concatenate(self._pending)
        take = num_rows * self.seq_len
        row_type = self._schema.field(0).type
        values = numpy_to_arrow(stream[:take], row_type.value_type)
        column = pa.FixedSizeListArray.from_arrays(values, type=row_type)
        self._writer.write_batch(pa.record_batch([column], schema=self._schema))
        self._pending, self._pending_tokens = [stream[take:]], len(stream) - take
        self.rows += num_rows


def numpy_to_arrow(values: np.ndarray, arrow_type: pa.DataType) -> pa.Array:
    """A 1-D integer array as an Arrow array of `arrow_type` over the same bytes. The
    values must fit the type (token ids are below vocab_size, which picked it): unlike
    pa.array() there is no overflow check, and no pandas import on the first call (a
    quarter second in every build task)."""
    values = np.ascontiguousarray(values, dtype=arrow_type.to_pandas_dtype())
    return pa.Array.from_buffers(arrow_type, len(values), [None, pa.py_buffer(values)])
