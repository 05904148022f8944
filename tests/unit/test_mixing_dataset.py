"""dataset.mixture in the dataset stage: one dataset per part from only its documents, a
top-level index over them, clear errors; and a dataset without a mixture unchanged."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pydantic import ValidationError
from tokenizers import Tokenizer

from stages.data.loader import ExampleLoader
from stages.data.packed import count_rows
from stages.dataset.config import DatasetConfig
from stages.dataset.mixture import source_matches
from stages.dataset.packing import is_validation
from stages.ingest.sharding import document_shards
from stages.objectives.registry import build_batch_builder
from tests.support.mixture_dataset import HORROR, MIXTURE, ROMANCE, SEQ_LEN, build_mixture, build_upstream


@pytest.fixture(scope="module")
def upstream(data_dir, tmp_path_factory) -> dict[str, Path]:
    return build_upstream(tmp_path_factory.mktemp("mixture-upstream"), data_dir)


@pytest.fixture(scope="module")
def built(upstream, tmp_path_factory) -> tuple[Path, dict]:
    output_dir = tmp_path_factory.mktemp("mixture")
    return output_dir, build_mixture(upstream, output_dir)


def part_streams(upstream: dict[str, Path], shard: Path, book: str) -> dict[str, list[int]]:
    """One part's token stream per split for one ingest shard, the slow, obvious way."""
    tokenizer = Tokenizer.from_file(str(upstream["tokenizer"] / "tokenizer.json"))
    streams: dict[str, list[int]] = {"train": [], "validation": []}
    for row in pq.read_table(shard).to_pylist():
        if row["source"] == book:
            split = "validation" if is_validation(row["id"], 0, 0.1) else "train"
            streams[split] += tokenizer.encode(row["text"]).ids + [0]  # <|endoftext|> = 0
    return streams


def read_rows(path: Path) -> np.ndarray:
    with pa.memory_map(str(path)) as source:
        table = pa.ipc.open_file(source).read_all()
    return np.asarray(table.column("input_ids").combine_chunks().flatten()).reshape(-1, SEQ_LEN)


def test_each_part_holds_exactly_its_own_documents(upstream, built):
    output_dir, _ = built
    for name, book in (("horror", HORROR), ("romance", ROMANCE)):
        index = json.loads((output_dir / name / "index.json").read_text())
        built_shards = {s["path"] for s in index["splits"]["train"]["shards"]}
        checked = 0
        for i, shard in enumerate(document_shards(upstream["ingest"])):
            streams = part_streams(upstream, shard, book)
            if not streams["train"] + streams["validation"]:
                assert f"train/shard-{i:05d}.arrow" not in built_shards  # no files of this part
                continue
            for split, stream in streams.items():
                rows = read_rows(output_dir / name / f"{split}/shard-{i:05d}.arrow")
                assert len(rows) == len(stream) // SEQ_LEN
                assert rows.ravel().tolist() == stream[:len(rows) * SEQ_LEN]
                checked += len(rows)
        assert checked == index["splits"]["train"]["rows"] + index["splits"]["validation"]["rows"] > 100


def test_the_top_level_index_names_the_parts_and_opens_as_one_dataset(built):
    output_dir, metrics = built
    index = json.loads((output_dir / "index.json").read_text())
    assert index["mixture"] == [{"name": p["name"], "weight": p["weight"], "path": p["name"]} for p in MIXTURE]
    assert (index["objective"], index["seq_len"], index["vocab_size"]) == ("clm", SEQ_LEN, 600)
    parts = {p["name"]: json.loads((output_dir / p["name"] / "index.json").read_text()) for p in MIXTURE}
    for split in ("train", "validation"):
        assert index["splits"][split]["rows"] == sum(p["splits"][split]["rows"] for p in parts.values())
        for shard in index["splits"][split]["shards"]:
            assert count_rows(output_dir / shard["path"]) == shard["rows"]
        assert metrics[f"{split}_tokens"] == index["splits"][split]["tokens"]
        for name, part in parts.items():
            assert metrics["mixture"][name][f"{split}_rows"] == part["splits"][split]["rows"]
    assert metrics["mixture"]["horror"]["weight"] == 3.0 and metrics["unmatched_files"] == 0
    whole = ExampleLoader(output_dir, "train", batch_size=8, batch_builder=build_batch_builder)  # every part's rows together
    assert whole.num_rows == index["splits"]["train"]["rows"]


def test_documents_no_part_matches_are_left_out_and_counted(upstream, tmp_path):
    metrics = build_mixture(upstream, tmp_path / "one", mixture=[{"name": "horror", "source": "corpus/gutenberg/The-*",
                                                                  "weight": 1}])
    assert metrics["unmatched_files"] == 1 and list(metrics["mixture"]) == ["horror"]


def test_a_part_that_matches_nothing_is_an_error_naming_its_key(upstream, tmp_path):
    with pytest.raises(ValueError, match=r"dataset.mixture\[1\].source = 'corpus/wiki/\*' .*matches no "
                                         r"ingested document.*corpus/gutenberg/pg7700.txt"):
        build_mixture(upstream, tmp_path / "a", mixture=[MIXTURE[0], {"name": "wiki", "source": "corpus/wiki/*",
                                                                       "weight": 1}])
    with pytest.raises(ValueError, match="went to the earlier part"):
        build_mixture(upstream, tmp_path / "b", mixture=[{"name": "all", "source": "corpus", "weight": 1},
                                                         {"name": "horror", "source": HORROR, "weight": 1}])


def test_source_patterns_match_like_ingest_paths():
    assert source_matches("corpus/gutenberg/a.txt", "corpus/gutenberg/a.txt")
    assert source_matches("corpus/gutenberg/a.txt", "corpus/gutenberg/")      # a folder above it
    assert source_matches("corpus/gutenberg/a.txt", "corpus/*/a.txt")
    assert not source_matches("corpus/gutenberg/a.txt", "corpus/*.txt")      # * stays in a folder
    assert source_matches("corpus/gutenberg/a.txt", "**/*.txt")
    assert not source_matches("corpus/gutenberg-2/a.txt", "corpus/gutenberg")
    assert source_matches("wikitext:wikitext-2-raw-v1:train", "wikitext:wikitext-2-raw-v1:train")


def test_config_without_a_mixture_keeps_its_fingerprint_input_and_bad_mixtures_are_refused():
    # The fingerprint hashes this dump: no "mixture" key, so single-source runs stay cached.
    assert "mixture" not in DatasetConfig().model_dump(mode="json")
    assert DatasetConfig(mixture=MIXTURE).model_dump(mode="json")["mixture"] == MIXTURE
    with pytest.raises(ValidationError, match="appear more than once"):
        DatasetConfig(mixture=[MIXTURE[0], MIXTURE[0]])
    with pytest.raises(ValidationError, match="greater than 0"):
        DatasetConfig(mixture=[{**MIXTURE[0], "weight": 0}])
    with pytest.raises(ValidationError, match="'train' or 'validation'"):
        DatasetConfig(mixture=[{**MIXTURE[0], "name": "train"}])
    with pytest.raises(ValidationError, match="pattern"):
        DatasetConfig(mixture=[{**MIXTURE[0], "name": "web/crawl"}])
