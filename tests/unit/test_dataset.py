"""The dataset stage (clm) as a plain function call, on two real books."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pydantic import ValidationError
from tokenizers import Tokenizer

from pipeline.context import StageContext
from stages.data.packed import count_rows
from stages.dataset.config import DatasetConfig
from stages.dataset.packing import is_validation
from stages.dataset.run import run as run_dataset
from stages.ingest.config import IngestConfig
from stages.ingest.run import run as run_ingest
from stages.ingest.sharding import document_shards
from stages.tokenizer.config import TokenizerConfig
from stages.tokenizer.run import run as run_tokenizer

BOOKS = ["corpus/gutenberg/The-Dunwich-Horror.txt", "corpus/gutenberg/pg7700.txt"]
SEQ_LEN = 32
VALIDATION_FRACTION = 0.1


def stage(name: str, config, output_dir: Path, inputs: dict, data_dir: str = "unused"):
    return StageContext(name=name, config=config, output_dir=output_dir, inputs=inputs,
                        experiment=SimpleNamespace(seed=0, data_dir=data_dir))


@pytest.fixture(scope="module")
def upstream(data_dir, tmp_path_factory) -> dict[str, Path]:
    ingest_dir, tokenizer_dir = tmp_path_factory.mktemp("ingest"), tmp_path_factory.mktemp("tok")
    run_ingest(stage("ingest", IngestConfig(sources=[{"path": b} for b in BOOKS], num_shards=3),
                     ingest_dir, {}, str(data_dir)))
    run_tokenizer(stage("tokenizer", TokenizerConfig(vocab_size=600), tokenizer_dir,
                        {"ingest": ingest_dir}))
    return {"ingest": ingest_dir, "tokenizer": tokenizer_dir}


def build(upstream: dict[str, Path], output_dir: Path, **options) -> dict:
    config = DatasetConfig(**{"seq_len": SEQ_LEN, "validation_fraction": VALIDATION_FRACTION,
                              **options})
    return run_dataset(stage("dataset", config, output_dir, upstream))


@pytest.fixture(scope="module")
def built(upstream, tmp_path_factory) -> tuple[Path, dict]:
    output_dir = tmp_path_factory.mktemp("dataset")
    return output_dir, build(upstream, output_dir)


def read_rows(path: Path) -> np.ndarray:
    with pa.memory_map(str(path)) as source:
        table = pa.ipc.open_file(source).read_all()
    assert table.schema.field("input_ids").type == pa.list_(pa.uint16(), SEQ_LEN)
    return np.asarray(table.column("input_ids").combine_chunks().flatten()).reshape(-1, SEQ_LEN)


def expected_streams(upstream: dict[str, Path], shard: Path) -> dict[str, list[int]]:
    """Each split's token stream for one ingest shard, built the slow, obvious way."""
    tokenizer = Tokenizer.from_file(str(upstream["tokenizer"] / "tokenizer.json"))
    streams: dict[str, list[int]] = {"train": [], "validation": []}
    for row in pq.read_table(shard).to_pylist():
        split = "validation" if is_validation(row["id"], 0, VALIDATION_FRACTION) else "train"
        streams[split] += tokenizer.encode(row["text"]).ids + [0]  # <|endoftext|> = 0
    return streams


def test_rows_are_documents_joined_by_eos_and_split_by_document(upstream, built):
    output_dir, _ = built
    for i, shard in enumerate(document_shards(upstream["ingest"])):
        streams = expected_streams(upstream, shard)
        for split, stream in streams.items():
            rows = read_rows(output_dir / f"{split}/shard-{i:05d}.arrow")
            # Exactly the split's own documents, in order, each followed by eos, cut into
            # full rows; only the unfinished last row is dropped. So no document is in both.
            assert len(rows) == len(stream) // SEQ_LEN > 0
            assert rows.ravel().tolist() == stream[:len(rows) * SEQ_LEN]


def test_index_matches_the_shards(upstream, built):
    output_dir, metrics = built
    index = json.loads((output_dir / "index.json").read_text())
    assert (index["objective"], index["seq_len"], index["dtype"]) == ("clm", SEQ_LEN, "uint16")
    assert (index["vocab_size"], index["eos_id"], index["pad_id"]) == (600, 0, 1)
    for split in ("train", "validation"):
        entry = index["splits"][split]
        paths = [f"{split}/shard-{i:05d}.arrow" for i in range(3)]
        assert [s["path"] for s in entry["shards"]] == paths
        for shard in entry["shards"]:
            assert count_rows(output_dir / shard["path"]) == shard["rows"]
            assert shard["tokens"] == shard["rows"] * SEQ_LEN
        assert entry["rows"] == sum(s["rows"] for s in entry["shards"]) == metrics[f"{split}_rows"]
        assert entry["tokens"] == metrics[f"{split}_tokens"] == entry["rows"] * SEQ_LEN
    share = metrics["validation_rows"] / (metrics["train_rows"] + metrics["validation_rows"])
    assert 0.03 < share < 0.25


def test_an_interrupted_build_keeps_finished_shards_and_resumes(built, upstream, tmp_path):
    output_dir, metrics = built
    resumed = tmp_path / "resumed"
    shutil.copytree(output_dir, resumed)
    (resumed / "index.json").unlink()
    (resumed / "train/shard-00002.arrow").unlink()  # the shard being written when it died
    (resumed / "train/shard-00002.arrow.partial").write_bytes(b"half a file")
    kept = (resumed / "train/shard-00000.arrow").stat().st_mtime_ns

    again = build(upstream, resumed)
    assert again["resumed_shards"] == 2
    assert (resumed / "train/shard-00000.arrow").stat().st_mtime_ns == kept
    for path in sorted(output_dir.rglob("*.arrow")) + [output_dir / "index.json"]:
        assert (resumed / path.relative_to(output_dir)).read_bytes() == path.read_bytes()
    assert not list(resumed.rglob("*.partial"))
    assert {k: again[k] for k in ("train_rows", "validation_tokens")} == {
        k: metrics[k] for k in ("train_rows", "validation_tokens")}


def test_max_tokens_stops_early_spread_over_shards(upstream, tmp_path):
    metrics = build(upstream, tmp_path / "capped", max_tokens=10 * SEQ_LEN + 1)
    assert metrics["train_rows"] == 11 and metrics["train_tokens"] == 11 * SEQ_LEN
    index = json.loads((tmp_path / "capped/index.json").read_text())
    assert [s["rows"] for s in index["splits"]["train"]["shards"]] == [4, 4, 3]


def test_config_errors_say_what_to_do():
    with pytest.raises(ValidationError, match="less than one row"):
        DatasetConfig(seq_len=128, max_tokens=100)
    with pytest.raises(ValidationError):
        DatasetConfig(validation_fraction=0)
    with pytest.raises(ValidationError):
        DatasetConfig(objective="rnn")


def test_the_split_is_a_fixed_function_of_id_and_seed():
    ids = [f"book.txt:{line}" for line in range(10_000)]
    validation = [i for i in ids if is_validation(i, 0, 0.1)]
    # Frozen: a change here moves documents between splits (bump the stage's code_version).
    assert validation[:5] == ["book.txt:0", "book.txt:5", "book.txt:10", "book.txt:32",
                              "book.txt:36"]
    assert 900 < len(validation) < 1100
    assert validation != [i for i in ids if is_validation(i, 1, 0.1)]
