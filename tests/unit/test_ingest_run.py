"""The ingest stage as a plain function call (no Ray): files in tmp_path, Parquet out."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from types import SimpleNamespace

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pydantic import ValidationError

from pipeline.context import StageContext
from stages.ingest.config import IngestConfig, SourceConfig
from stages.ingest.run import run
from stages.ingest.sharding import document_shards

LICENCE = ("This eBook is for the use of anyone anywhere at no cost and with\r\n"
           "almost no restrictions whatsoever.")
LONG = "x" * 30  # a paragraph comfortably over min_chars


def ingest(data_dir: Path, output_dir: Path, sources: list[dict], **options) -> dict:
    config = IngestConfig(sources=sources, **{"min_chars": 10, **options})
    ctx = StageContext(name="ingest", config=config, output_dir=output_dir,
                       experiment=SimpleNamespace(seed=0, data_dir=str(data_dir)))
    return run(ctx)


def documents(output_dir: Path) -> list[dict]:
    return pq.read_table(document_shards(output_dir)).to_pylist()


def write(path: Path, content: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content.encode("utf-8") if isinstance(content, str) else content)
    return path


def test_documents_have_the_contract_schema_and_locations(tmp_path):
    write(tmp_path / "data/books/a.txt",
          "\ufeffChapter One\r\n\r\nThe first paragraph,\r\nhard-wrapped.\r\n\r\nTiny\r\n")
    metrics = ingest(tmp_path / "data", tmp_path / "out", [{"path": "books/*.txt"}])

    table = pq.read_table(document_shards(tmp_path / "out"))
    assert table.schema.names == ["id", "text", "sentences", "source", "source_line",
                                  "metadata"]
    assert table.schema.types == [pa.string(), pa.string(), pa.list_(pa.string()), pa.string(),
                                  pa.int64(), pa.string()]
    assert table.to_pylist() == [
        {"id": "books/a.txt:1", "text": "Chapter One", "sentences": ["Chapter One"],
         "source": "books/a.txt", "source_line": 1, "metadata": None},
        {"id": "books/a.txt:3", "text": "The first paragraph, hard-wrapped.",
         "sentences": ["The first paragraph, hard-wrapped."], "source": "books/a.txt",
         "source_line": 3, "metadata": None},
    ]
    assert metrics["documents_in"] == 3 and metrics["documents_out"] == 2
    assert metrics["dropped_short"] == 1  # "Tiny" < min_chars
    assert metrics["bytes_in"] == (tmp_path / "data/books/a.txt").stat().st_size
    assert metrics["bytes_out"] == len("Chapter One") + len("The first paragraph, hard-wrapped.")
    assert not (tmp_path / "out/staging").exists()


def test_duplicates_are_dropped_across_files_and_shards_first_in_sorted_order_wins(tmp_path):
    for name in ("c.txt", "a.txt", "b.txt"):
        write(tmp_path / "data" / name, f"{name} {LONG}\n\n{LICENCE}\n")
    # The licence wrapped differently is the same paragraph once unwrapped.
    write(tmp_path / "data/d.txt", LICENCE.replace("\r\n", " ").replace(" at no", "\nat no"))
    metrics = ingest(tmp_path / "data", tmp_path / "out", [{"path": "."}], num_shards=3)

    rows = documents(tmp_path / "out")
    licences = [row for row in rows if row["text"].startswith("This eBook")]
    assert [row["id"] for row in licences] == ["a.txt:3"]
    assert metrics["dropped_duplicate"] == 3 and metrics["documents_out"] == 4
    assert [row["source"] for row in rows] == ["a.txt", "a.txt", "b.txt", "c.txt"]
    assert len(document_shards(tmp_path / "out")) == 3

    ingest(tmp_path / "data", tmp_path / "kept", [{"path": "."}], dedup="none")
    assert len(documents(tmp_path / "kept")) == 7


def test_output_bytes_are_identical_across_runs(tmp_path):
    for i in range(5):
        write(tmp_path / f"data/book{i}.txt", "\n\n".join(f"Book {i} paragraph {j} {LONG}"
                                                           for j in range(50)))
    first = ingest(tmp_path / "data", tmp_path / "one", [{"path": "*.txt"}], num_shards=3)
    second = ingest(tmp_path / "data", tmp_path / "two", [{"path": "*.txt"}], num_shards=3)
    assert first == second
    one, two = document_shards(tmp_path / "one"), document_shards(tmp_path / "two")
    assert len(one) == 3 and [p.read_bytes() for p in one] == [p.read_bytes() for p in two]
    # Shards are contiguous runs of the corpus order, balanced by bytes.
    sizes = [pq.read_metadata(p).num_rows for p in one]
    assert sum(sizes) == 250 and max(sizes) - min(sizes) <= 2


def test_invalid_utf8_is_replaced_and_counted(tmp_path):
    write(tmp_path / "data/latin1.txt", "Na\u00efve caf\u00e9 text here".encode("latin-1"))
    metrics = ingest(tmp_path / "data", tmp_path / "out", [{"path": "latin1.txt"}])
    assert metrics["invalid_utf8_replaced"] == 2
    assert documents(tmp_path / "out")[0]["text"] == "Na\ufffdve caf\ufffd text here"


def test_jsonl_with_a_configured_text_field_and_gzip(tmp_path):
    lines = [{"content": f"record {i}: {LONG}\n\nsecond\tparagraph"} for i in range(3)]
    payload = "\n".join(json.dumps(line) for line in lines[:2]) + "\n\n" + json.dumps(lines[2])
    write(tmp_path / "data/records.jsonl.gz", gzip.compress(payload.encode()))
    ingest(tmp_path / "data", tmp_path / "out",
           [{"path": "records.jsonl.gz", "format": "jsonl", "text_field": "content"}])
    rows = documents(tmp_path / "out")
    assert [row["source_line"] for row in rows] == [1, 2, 4]
    assert rows[0]["text"] == f"record 0: {LONG}\n\nsecond paragraph"


def test_malformed_jsonl_line_names_file_and_line(tmp_path):
    write(tmp_path / "data/bad.jsonl", '{"text": "fine, long enough"}\n{"text": "oops"\n')
    with pytest.raises(ValueError, match=r"bad\.jsonl:2: not valid JSON"):
        ingest(tmp_path / "data", tmp_path / "out", [{"path": "bad.jsonl", "format": "jsonl"}])
    write(tmp_path / "data/list.jsonl", '["text", "in a list"]\n')
    with pytest.raises(ValueError, match=r"list\.jsonl:1: a JSON list, not an object"):
        ingest(tmp_path / "data", tmp_path / "out", [{"path": "list.jsonl", "format": "jsonl"}])


def test_jsonl_line_without_the_text_field_names_file_line_and_key(tmp_path):
    write(tmp_path / "data/docs.jsonl", '{"text": "fine, long enough"}\n\n{"body": "x"}\n')
    with pytest.raises(ValueError, match=r"docs\.jsonl:3: text field 'text' is missing "
                                         r"\(keys: body\); set ingest\.sources\[0\]\.text_field"):
        ingest(tmp_path / "data", tmp_path / "out", [{"path": "docs.jsonl", "format": "jsonl"}])


def test_a_source_that_matches_nothing_names_the_config_key_and_resolved_path(tmp_path):
    write(tmp_path / "data/a.txt", LONG)
    with pytest.raises(FileNotFoundError) as error:
        ingest(tmp_path / "data", tmp_path / "out", [{"path": "a.txt"}, {"path": "corpus/*.txt"}])
    message = str(error.value)
    assert "ingest.sources[1].path = 'corpus/*.txt'" in message
    assert str(tmp_path / "data/corpus/*.txt") in message and "data_dir" in message


def test_real_books_lose_bom_crlf_and_repeated_licence(data_dir, tmp_path):
    books = ["The-Dunwich-Horror.txt", "pg7700.txt"]  # both CRLF + BOM + PG licence
    sources = [{"path": f"corpus/gutenberg/{book}"} for book in books]
    metrics = ingest(data_dir, tmp_path / "out", sources, min_chars=20)
    texts = [row["text"] for row in documents(tmp_path / "out")]
    assert metrics["dropped_duplicate"] > 20  # the second book's licence paragraphs
    assert len(texts) == len(set(texts)) == metrics["documents_out"]
    assert not any("\r" in t or "\ufeff" in t or "  " in t for t in texts)
    assert texts[0].startswith("The Project Gutenberg EBook of The Dunwich Horror")


def test_config_errors_say_what_to_do():
    with pytest.raises(ValidationError, match="'split' applies to format 'text' only, not "
                                              "'jsonl'; remove 'split'"):
        SourceConfig(path="x.jsonl", format="jsonl", split="line")
    with pytest.raises(ValidationError, match="'text_field' applies to format 'jsonl' / "
                                              "'parquet' / 'csv' / 'huggingface' only"):
        SourceConfig(path="x.txt", text_field="body")
    with pytest.raises(ValidationError, match="'csv_delimiter' applies to format 'csv' only"):
        SourceConfig(path="x.parquet", format="parquet", csv_delimiter="\t")
    with pytest.raises(ValidationError, match="'hf_split' applies to format 'huggingface'"):
        SourceConfig(path="x.csv", format="csv", hf_split="test")
    with pytest.raises(ValidationError):
        IngestConfig(sources=[])
    with pytest.raises(ValidationError):
        IngestConfig(sources=[{"path": "x"}], normalization="NFD")
