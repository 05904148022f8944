"""Perplexity on any ingest-format source: a folder of the ingest stage's Parquet shards is
a task's data, read in shard order, fingerprinted file by file, and a bad shard is named."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from stages.evaluate.inputs import task_files
from stages.evaluate.readers import TaskDataError, read_task_data
from stages.evaluate.spec import load_task_spec


def write_spec(tmp_path: Path, data: Path) -> Path:
    spec = tmp_path / "heldout.yaml"
    spec.write_text(f"name: heldout\nkind: perplexity\nsplits:\n  test: {{path: {data}, format: parquet}}\n"
                    "eval_split: test\ndoc_to_target: '{{text}}'\nmetrics: [token_perplexity, bits_per_byte]\n")
    return spec


def test_a_folder_of_ingest_shards_is_read_in_order_and_fingerprinted(tmp_path):
    shards = tmp_path / "ingest"
    shards.mkdir()
    for index, texts in enumerate((["first doc", "second doc"], ["third doc"])):
        pq.write_table(pa.table({"id": [f"{index}-{i}" for i in range(len(texts))], "text": texts}),
                       shards / f"shard-{index:05d}.parquet")
    spec = load_task_spec(write_spec(tmp_path, shards))
    rows = read_task_data(spec, tmp_path)["test"]
    assert [row["text"] for row in rows.rows] == ["first doc", "second doc", "third doc"]
    assert rows.where[2].endswith("shard-00001.parquet: row 0")
    files = task_files([str(write_spec(tmp_path, shards))], tmp_path)
    assert {Path(p).name for p in files.values()} >= {"shard-00000.parquet", "shard-00001.parquet"}


def test_a_damaged_shard_is_named(tmp_path):
    shards = tmp_path / "ingest"
    shards.mkdir()
    (shards / "shard-00000.parquet").write_bytes(b"not parquet at all")
    spec = load_task_spec(write_spec(tmp_path, shards))
    with pytest.raises(TaskDataError, match="shard-00000.parquet: not a readable Parquet file"):
        read_task_data(spec, tmp_path)
