"""The on-disk format of a tokenized dataset, shared by the writer (the dataset stage)
and the reader (`stages.data.loader`). pyarrow only.

    <dataset_dir>/index.json
    <dataset_dir>/<split>/shard-00000.arrow ...   Arrow IPC files, one column:
        input_ids: fixed_size_list<uint16>[seq_len]   (int32 when vocab_size > 65535)

index.json:
    {"objective": "clm", "seq_len": 128, "vocab_size": 8192, "dtype": "uint16",
     "eos_id": 0, "pad_id": 1,
     "splits": {"train": {"shards": [{"path": "train/shard-00000.arrow", "rows": N,
                                       "tokens": N * seq_len}, ...],
                          "rows": ..., "tokens": ...},
                "validation": {...}}}
Paths are relative to the dataset directory. A shard file with its final name is always
complete (it is written under a temporary name and renamed).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

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
    with pa.memory_map(str(path)) as source:
        reader = pa.ipc.open_file(source)
        return sum(reader.get_batch(i).num_rows for i in range(reader.num_record_batches))


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
    return json.loads(path.read_text(encoding="utf-8"))
