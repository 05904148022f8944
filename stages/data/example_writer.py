"""Examples with several fixed-size columns -> one Arrow IPC shard file (mlm, span).

The clm objective writes its single column with `RowWriter` (rows.py); the others build
whole examples and hand them over here, one dict of equal-length column arrays at a time.
"""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa

from stages.data.row_writer import ROWS_PER_RECORD_BATCH, numpy_to_arrow


def column_field(name: str, dtype: str, width: int | None) -> pa.Field:
    """width None: one scalar per example; otherwise fixed_size_list<dtype>[width]."""
    value_type = pa.type_for_alias(dtype)
    return pa.field(name, value_type if width is None else pa.list_(value_type, width))


class ExampleWriter:
    """Buffers examples and writes record batches of ROWS_PER_RECORD_BATCH rows to
    `<path>.partial`; `commit()` writes the rest and renames (a file with the final name
    is complete). Stops taking examples at `max_rows` (`full`)."""

    def __init__(self, path: str, schema: pa.Schema, max_rows: int | None = None):
        self.path = path
        self.schema = schema
        self.max_rows = max_rows
        self.rows = 0
        self._pending: dict[str, list[np.ndarray]] = {f.name: [] for f in schema}
        self._pending_rows = 0
        self._partial_path = path + ".partial"
        self._writer = pa.ipc.new_file(self._partial_path, schema)

    @property
    def full(self) -> bool:
        return self.max_rows is not None and self.rows + self._pending_rows >= self.max_rows

    def add(self, columns: dict[str, np.ndarray]) -> None:
        """Columns of n examples: (n,) for scalars, (n, width) for token columns."""
        num = len(next(iter(columns.values())))
        if self.max_rows is not None:
            num = min(num, self.max_rows - self.rows - self._pending_rows)
        if num <= 0:
            return
        for name, values in columns.items():
            self._pending[name].append(values[:num])
        self._pending_rows += num
        if self._pending_rows >= ROWS_PER_RECORD_BATCH:
            self._flush(keep_partial_batch=True)

    def commit(self) -> int:
        self._flush(keep_partial_batch=False)
        self._writer.close()
        os.replace(self._partial_path, self.path)
        return self.rows

    def _flush(self, keep_partial_batch: bool) -> None:
        if not self._pending_rows:
            return
        stacked = {name: np.concatenate(parts) for name, parts in self._pending.items()}
        start = 0
        while self._pending_rows - start >= ROWS_PER_RECORD_BATCH or (
                not keep_partial_batch and start < self._pending_rows):
            stop = min(start + ROWS_PER_RECORD_BATCH, self._pending_rows)
            self._writer.write_batch(pa.record_batch(
                [_arrow_column(field, stacked[field.name][start:stop]) for field in self.schema],
                schema=self.schema))
            self.rows += stop - start
            start = stop
        self._pending = {name: [values[start:]] for name, values in stacked.items()}
        self._pending_rows -= start


def _arrow_column(field: pa.Field, values: np.ndarray) -> pa.Array:
    if isinstance(field.type, pa.FixedSizeListType):
        flat = numpy_to_arrow(values.reshape(-1), field.type.value_type)
        return pa.FixedSizeListArray.from_arrays(flat, type=field.type)
    return numpy_to_arrow(values, field.type)
