"""The issue's bad-input list through the engine (`pretrain run --only ingest`, no Ray):
each stops the stage with an error naming file and line (or config key), and leaves no
manifest, so nothing half-written is taken as finished; on_error: skip finishes with the
count in the manifest instead."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.config import load_config
from pipeline.planner import Selection
from pipeline.runner import StageFailed, run_pipeline

PROSE = "The old farmhouse stood on the hill above the river and nobody went near it."


def write_config(tmp_path: Path, source: dict, *more_sources: dict, **options) -> Path:
    ingest = {"sources": [source, *more_sources], **options}
    path = tmp_path / "experiment.yaml"
    path.write_text(json.dumps({"name": "bad-input", "workdir": str(tmp_path / "work"),
                                "data_dir": str(tmp_path / "data"), "ingest": ingest}))
    return path


def run_ingest(config_path: Path):
    cfg = load_config(config_path)
    run_pipeline(cfg, Selection(only=("ingest",)), echo=lambda *_: None, use_ray=False)
    return cfg


def manifests(tmp_path: Path) -> list[Path]:
    return list((tmp_path / "work").glob("ingest/*/manifest.json"))


def truncated_gzip() -> bytes:
    payload = gzip.compress("\n\n".join(f"{PROSE} {i}" for i in range(3000)).encode())
    return payload[:len(payload) // 2]


def parquet_bytes(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    return sink.getvalue().to_pybytes()


# (file name, its bytes, source config, extra ingest keys, error pattern)
BAD_INPUT = {
    "invalid_utf8": ("a.txt", PROSE.encode() + b"\n\nbad \xff byte\n", {}, {"invalid_utf8": "fail"},
                     r"a\.txt:3: 1 byte\(s\) that are not valid UTF-8"),
    "malformed_jsonl": ("a.jsonl", f'{{"text": "{PROSE}"}}\n{{"text": oops}}\n',
                        {"format": "jsonl"}, {}, r"a\.jsonl:2: not valid JSON"),
    "jsonl_without_text": ("a.jsonl", f'{{"text": "{PROSE}"}}\n{{"body": "x"}}\n',
                           {"format": "jsonl"}, {}, r"a\.jsonl:2: text field 'text' is missing"),
    "truncated_gz": ("a.txt.gz", truncated_gzip(), {}, {},
                     r"a\.txt\.gz: cannot be read after line \d+"),
    "csv_without_column": ("a.csv", f"body\n{PROSE}\n", {"format": "csv"}, {},
                           r"a\.csv: no column 'text' \(found: body\)"),
    "parquet_without_column": ("a.parquet", parquet_bytes(pa.table({"body": [PROSE]})),
                               {"format": "parquet"}, {}, r"a\.parquet: no column 'text'"),
    "nonexistent_path": (None, b"", {"path": "missing.txt"}, {},
                         r"ingest\.sources\[0\]\.path = 'missing\.txt' matched no files"),
    "glob_matching_nothing": (None, b"", {"path": "corpus/*.txt"}, {},
                              r"ingest\.sources\[0\]\.path = 'corpus/\*\.txt' matched no files"),
}


@pytest.mark.parametrize("case", BAD_INPUT)
def test_bad_input_fails_the_stage_naming_the_place_and_commits_nothing(tmp_path, case):
    name, content, source, options, pattern = BAD_INPUT[case]
    (tmp_path / "data").mkdir()
    if name is not None:
        data = content.encode() if isinstance(content, str) else content
        (tmp_path / "data" / name).write_bytes(data)
    config = write_config(tmp_path, {"path": name, **source}, **options)
    with pytest.raises(StageFailed, match=r"stage 'ingest' failed: \w+: " + pattern):
        run_ingest(config)
    assert manifests(tmp_path) == []


@pytest.mark.parametrize(("case", "count"), [("malformed_jsonl", "skipped_records"),
                                             ("jsonl_without_text", "skipped_records"),
                                             ("truncated_gz", "skipped_files")])
def test_on_error_skip_finishes_with_the_count_in_the_manifest(tmp_path, case, count):
    name, content, source, options, _ = BAD_INPUT[case]
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / name).write_bytes(content.encode() if isinstance(content, str)
                                           else content)
    # A good file beside it: a corpus without any document is an error (test_ingest_empty.py).
    (tmp_path / "data" / "good.txt").write_text("A second, different paragraph of good prose.")
    run_ingest(write_config(tmp_path, {"path": name, **source}, {"path": "good.txt"},
                            on_error="skip"))
    [manifest] = manifests(tmp_path)
    metrics = json.loads(manifest.read_text())["metrics"]
    # The JSONL files' good first line is kept; nothing of the half-read .gz is.
    assert metrics[count] == 1
    assert metrics["documents_out"] == (1 if count == "skipped_files" else 2)
