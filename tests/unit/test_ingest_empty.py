"""A corpus without documents stops ingest naming its sources and files; an empty file
among others is counted and named in a warning; NUL characters removed are counted."""

from __future__ import annotations

import json

import pytest

from tests.unit.test_ingest_run import documents, ingest, write

PROSE = "The old farmhouse stood on the hill above the river, and nobody went near it."


def test_an_empty_corpus_file_is_an_error_naming_the_source_and_file(tmp_path):
    write(tmp_path / "data/corpus/empty.txt", b"")
    write(tmp_path / "data/corpus/blank.txt", b"\n\n  \n\x00\n")
    with pytest.raises(ValueError, match=r"the corpus yielded no documents.*\n  ingest\.sources\[0\]\.path "
                                         r"= 'corpus/\*\.txt': 2 files without documents: "
                                         r"corpus/blank\.txt, corpus/empty\.txt"):
        ingest(tmp_path / "data", tmp_path / "out", [{"path": "corpus/*.txt"}])
    assert not list((tmp_path / "out").glob("documents/*.parquet"))


def test_records_without_text_in_every_source_name_each_source(tmp_path):
    write(tmp_path / "data/a.jsonl", b"\n")
    write(tmp_path / "data/b.csv", b"text\n")
    with pytest.raises(ValueError, match=r"ingest\.sources\[0\]\.path = 'a\.jsonl': 1 file without "
                                         r"documents: a\.jsonl\n  ingest\.sources\[1\]\.path = 'b\.csv'"):
        ingest(tmp_path / "data", tmp_path / "out",
               [{"path": "a.jsonl", "format": "jsonl"}, {"path": "b.csv", "format": "csv"}])


def test_a_corpus_filtered_down_to_nothing_is_an_error_naming_the_filters(tmp_path):
    write(tmp_path / "data/a.txt", "short\n\ntiny")
    with pytest.raises(ValueError, match=r"every one of the 2 documents read was removed "
                                         r"\(min_chars: 2\).*ingest\.min_chars is 10"):
        ingest(tmp_path / "data", tmp_path / "out", [{"path": "a.txt"}])


def test_an_empty_file_among_others_is_counted_and_named_in_a_warning(tmp_path, capsys):
    write(tmp_path / "data/corpus/a.txt", PROSE)
    write(tmp_path / "data/corpus/b.txt", b"")
    metrics = ingest(tmp_path / "data", tmp_path / "out", [{"path": "corpus/*.txt"}])
    assert metrics["empty_files"] == 1 and metrics["documents_out"] == 1
    out = capsys.readouterr().out
    assert "[ingest] warning: 1 of 2 files held no documents" in out
    assert "ingest.sources[0].path = 'corpus/*.txt': 1 file without documents: corpus/b.txt" in out


def test_nul_characters_are_removed_and_counted(tmp_path):
    write(tmp_path / "data/nul.txt", b"The\x00 old farm\x00house stood there quietly.\x00\n")
    write(tmp_path / "data/records.jsonl",
          json.dumps({"text": "A record\u0000 with one NUL in its text field."}).encode() + b"\n")
    metrics = ingest(tmp_path / "data", tmp_path / "out",
                     [{"path": "nul.txt"}, {"path": "records.jsonl", "format": "jsonl"}])
    assert [row["text"] for row in documents(tmp_path / "out")] == [
        "The old farmhouse stood there quietly.", "A record with one NUL in its text field."]
    assert metrics["nul_bytes_removed"] == 4
