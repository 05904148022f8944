"""The on-disk format of a tokenized dataset, shared by the writer (the dataset stage)
and the reader (`stages.data.loader`). pyarrow (+ numpy) only.

    <dataset_dir>/index.json
    <dataset_dir>/<split>/shard-00000.arrow ...   Arrow IPC files, fixed-size columns:
        input_ids: fixed_size_list<uint16>[seq_len]   (int32 when vocab_size > 65535)
    clm:  input_ids only (document boundaries = the eos tokens)
    mlm:  + token_type_ids fixed_size_list<uint8>[seq_len], num_tokens int32,
          next_sentence_label int8 (nsp/sop), labels fixed_size_list<dtype>[seq_len]
          (static masking; pad_id where nothing is predicted)
    span: input_ids [seq_len] + labels fixed_size_list<dtype>[targets_length]

index.json:
    {"objective": "clm", "seq_len": 128, "vocab_size": 8192, "dtype": "uint16",
     "eos_id": 0, "pad_id": 1,
     "splits": {"train": {"shards": [{"path": "train/shard-00000.arrow", "rows": N,
                                       "tokens": N * seq_len}, ...],
                          "rows": ..., "tokens": ...},
                "validation": {...}}}
mlm and span indexes also hold "special" (token ids), "mlm" / "span" (the objective's
settings the loader needs: masking policy, lengths, sentinels) and "stats".
Paths are relative to the dataset directory. A shard file with its final name is always
complete (it is written under a temporary name and renamed).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pyarrow as pa

INDEX_FILE = "index.json"
COLUMN = "input_ids"
SPLITS = ("train", "validation")
_UINT16_MAX_VOCAB = 65535


def token_dtype(vocab_size: int) -> str:
    """The narrowest Arrow integer type that holds every token id."""
    return "uint16" if vocab_size <= _UINT16_MAX_VOCAB else "int32"


def row_schema(seq_len: int, dtype: str) -> pa.Schema:
    return pa.schema([pa.field(COLUMN, pa.list_(pa.type_for_alias(dtype), seq_len))])


def shard_path(split: str, index: int) -> str:
    """Relative path of one shard, as index.json records it."""
    return f"{split}/shard-{index:05d}.arrow"


def count_rows(path: str | os.PathLike) -> int:
    """Rows in a finished shard, read from its record-batch footers (memory-mapped)."""
    reader = open_shard(path)
    try:
        return sum(reader.get_batch(i).num_rows for i in range(reader.num_record_batches))
    except (OSError, ValueError) as error:
        raise damaged_shard(path, error) from error


class DamagedShardError(ValueError):
    """A dataset file that is missing, truncated or garbled, or holds values the dataset
    cannot hold; the message names the file and how to rebuild it."""


REBUILD_HINT = ("rebuild the dataset with `pretrain run CONFIG --force dataset` (`pretrain "
                "verify RUN_DIR` checks every finished stage's files against its manifest)")


def damaged_shard(path: str | os.PathLike, error: Exception) -> DamagedShardError:
    return DamagedShardError(
        f"{path}: not a readable dataset shard ({type(error).__name__}: {error}); the file "
        f"is missing, truncated or damaged: {REBUILD_HINT}")


def open_shard(path: str | os.PathLike) -> pa.ipc.RecordBatchFileReader:
    """A shard's Arrow IPC reader over a memory map. pyarrow's own errors ("Not an Arrow
    file") do not say which file, so they are re-raised as DamagedShardError naming it."""
    try:
        return pa.ipc.open_file(pa.memory_map(str(path)))
    except (OSError, ValueError) as error:  # ArrowInvalid is a ValueError
        raise damaged_shard(path, error) from error


def read_batches(reader: pa.ipc.RecordBatchFileReader,
                 path: str | os.PathLike) -> list[dict[str, np.ndarray]]:
    """`column_arrays` of every record batch of an open shard (zero-copy: pages are read
    only when a value is used)."""
    try:
        return [column_arrays(reader.get_batch(i)) for i in range(reader.num_record_batches)]
    except (OSError, ValueError) as error:  # a garbled batch header or buffer length
        raise damaged_shard(path, error) from error


def write_index(dataset_dir: str | os.PathLike, index: dict) -> None:
    path = Path(dataset_dir) / INDEX_FILE
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(index, indent=2) + "\n", encoding="utf-8")
    os.replace(partial, path)


def read_index(dataset_dir: str | os.PathLike) -> dict:
    path = Path(dataset_dir) / INDEX_FILE
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} does not exist: {dataset_dir} is not a finished dataset stage output "
            f"(run the dataset stage first: pretrain run <config> --only dataset)")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise DamagedShardError(f"{path}: not valid JSON ({error}); {REBUILD_HINT}") from error


def column_arrays(batch: pa.RecordBatch) -> dict[str, np.ndarray]:
    """Zero-copy numpy views of a record batch: (rows, width) for fixed-size list columns,
    (rows,) for scalar columns."""
    out = {}
    for name, column in zip(batch.schema.names, batch.columns, strict=True):
        if isinstance(column.type, pa.FixedSizeListType):
            out[name] = _numpy_view(column.flatten()).reshape(len(column), column.type.list_size)
        else:
            out[name] = _numpy_view(column)
    return out


def _numpy_view(array: pa.Array) -> np.ndarray:
    """The values of a primitive array without nulls, read-only, over Arrow's own buffer.
    (Array.to_numpy does the same, but its first call imports pandas: a quarter second in
    every build task and every loader process.)"""
    assert array.null_count == 0, "dataset columns have no nulls"
    dtype = np.dtype(array.type.to_pandas_dtype())
    return np.frombuffer(array.buffers()[1], dtype=dtype, count=len(array),
                         offset=array.offset * dtype.itemsize)
