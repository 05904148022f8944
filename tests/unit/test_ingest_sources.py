"""Every source format through the ingest stage, with files the tests write: JSONL
metadata, CSV, Parquet, Hugging Face datasets (save_to_disk and the Hub path), and
.gz / .bz2 / .zst read transparently. Bad input names the file, line and what to do."""

from __future__ import annotations

import bz2
import gzip
import json

import datasets
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard

from stages.ray_tasks import run_in_process
from tests.unit.test_ingest_run import documents, ingest, write

PROSE = "The old farmhouse stood on the hill above the river, and nobody went near it."
OTHER = "A second document, long enough to pass the length filter of the stage."


def located(output_dir) -> list[tuple[str, str, str | None]]:
    return [(row["id"], row["text"], row["metadata"]) for row in documents(output_dir)]


# --- JSONL metadata, compression ----------------------------------------------------------

def test_jsonl_extra_fields_are_kept_as_metadata(tmp_path):
    write(tmp_path / "data/docs.jsonl",
          json.dumps({"url": "https://a", "text": PROSE, "lang": "en", "score": 0.5}) + "\n"
          + json.dumps({"text": OTHER}) + "\n")
    ingest(tmp_path / "data", tmp_path / "out", [{"path": "docs.jsonl", "format": "jsonl"}])
    assert located(tmp_path / "out") == [
        ("docs.jsonl:1", PROSE, '{"lang": "en", "score": 0.5, "url": "https://a"}'),
        ("docs.jsonl:2", OTHER, None),
    ]


def test_gz_bz2_and_zst_are_read_like_the_plain_file(tmp_path):
    text = f"{PROSE}\n\n{OTHER}\n".encode()
    write(tmp_path / "data/plain/book.txt", text)
    write(tmp_path / "data/packed/a.txt.gz", gzip.compress(text))
    write(tmp_path / "data/packed/b.txt.bz2", bz2.compress(text))
    write(tmp_path / "data/packed/c.txt.zst", zstandard.ZstdCompressor().compress(text))
    ingest(tmp_path / "data", tmp_path / "plain", [{"path": "plain"}])
    ingest(tmp_path / "data", tmp_path / "packed", [{"path": "packed"}], dedup="none")
    plain = [row["text"] for row in documents(tmp_path / "plain")]
    assert plain == [PROSE, OTHER]
    assert [(row["source"], row["text"]) for row in documents(tmp_path / "packed")] == [
        (f"packed/{name}", text) for name in ("a.txt.gz", "b.txt.bz2", "c.txt.zst")
        for text in plain]


def test_truncated_bz2_names_the_file(tmp_path):
    payload = bz2.compress("\n\n".join(f"{PROSE} {i}" for i in range(3000)).encode())
    write(tmp_path / "data/cut.txt.bz2", payload[:len(payload) // 2])
    with pytest.raises(ValueError, match=r"cut\.txt\.bz2: cannot be read after line \d+"):
        ingest(tmp_path / "data", tmp_path / "out", [{"path": "cut.txt.bz2"}])


# --- CSV ----------------------------------------------------------------------------------

def test_csv_rows_with_a_configured_column_quoted_breaks_and_long_cells(tmp_path):
    long_cell = "word " * 40_000  # 200 kB: over csv's default 128 KiB field limit
    write(tmp_path / "data/docs.csv",
          'title,body,year\n'
          f'First,"{PROSE}",1901\n'
          '\n'
          f'"Second, with a comma","{OTHER[:20]}\n\n{OTHER[20:]}",1902\n'
          f'Long,{long_cell},1903\n')
    metrics = ingest(tmp_path / "data", tmp_path / "out",
                     [{"path": "docs.csv", "format": "csv", "text_field": "body"}])
    rows = located(tmp_path / "out")
    assert rows[:2] == [
        ("docs.csv:2", PROSE, '{"title": "First", "year": "1901"}'),
        ("docs.csv:4", f"{OTHER[:20].rstrip()}\n\n{OTHER[20:]}",
         '{"title": "Second, with a comma", "year": "1902"}'),
    ]
    assert rows[2][0] == "docs.csv:7" and rows[2][1] == long_cell.strip()
    assert metrics["bytes_in"] == (tmp_path / "data/docs.csv").stat().st_size


def test_tsv_through_csv_delimiter(tmp_path):
    write(tmp_path / "data/docs.tsv", f"id\ttext\n7\t{PROSE}\n")
    ingest(tmp_path / "data", tmp_path / "out",
           [{"path": "docs.tsv", "format": "csv", "csv_delimiter": "\t"}])
    assert located(tmp_path / "out") == [("docs.tsv:2", PROSE, '{"id": "7"}')]


def test_csv_without_the_text_column_names_file_and_column(tmp_path):
    write(tmp_path / "data/docs.csv", f"title,body\nFirst,{PROSE}\n")
    with pytest.raises(ValueError, match=r"^docs\.csv: no column 'text' \(found: title, body\); "
                                         r"set ingest\.sources\[0\]\.text_field"):
        ingest(tmp_path / "data", tmp_path / "out", [{"path": "docs.csv", "format": "csv"}])
    assert not list((tmp_path / "out").glob("documents/*.parquet"))


def test_csv_row_with_a_wrong_number_of_fields_fails_or_is_skipped(tmp_path):
    write(tmp_path / "data/docs.csv", f'text,year\n"{PROSE}",1901\n"{OTHER}",19,02\n')
    with pytest.raises(ValueError, match=r"^docs\.csv:3: 3 fields where the header has 2"):
        ingest(tmp_path / "data", tmp_path / "out", [{"path": "docs.csv", "format": "csv"}])
    metrics = ingest(tmp_path / "data", tmp_path / "skip",
                     [{"path": "docs.csv", "format": "csv"}], on_error="skip")
    assert metrics["skipped_records"] == 1
    assert located(tmp_path / "skip") == [("docs.csv:2", PROSE, '{"year": "1901"}')]


def test_csv_with_an_unclosed_quote_names_the_file(tmp_path):
    write(tmp_path / "data/docs.csv", f'text\n"{PROSE}\n')
    with pytest.raises(ValueError, match=r"^docs\.csv:2: not valid CSV"):
        ingest(tmp_path / "data", tmp_path / "out", [{"path": "docs.csv", "format": "csv"}])


# --- Parquet ------------------------------------------------------------------------------

def test_parquet_rows_keep_other_columns_as_metadata(tmp_path):
    (tmp_path / "data").mkdir()
    table = pa.table({"content": [PROSE, OTHER, PROSE], "n": [1, 2, 3],
                      "tags": [["a"], [], ["b", "c"]]})
    # Three row groups: the reader streams batches, row numbers run on across them.
    pq.write_table(table, tmp_path / "data/docs.parquet", row_group_size=1)
    metrics = ingest(tmp_path / "data", tmp_path / "out",
                     [{"path": "*.parquet", "format": "parquet", "text_field": "content"}])
    assert located(tmp_path / "out") == [
        ("docs.parquet:1", PROSE, '{"n": 1, "tags": ["a"]}'),
        ("docs.parquet:2", OTHER, '{"n": 2, "tags": []}'),
    ]
    assert metrics["dropped_duplicate"] == 1
    assert metrics["bytes_in"] == len(PROSE) * 2 + len(OTHER)


def test_parquet_without_the_text_column_names_file_and_column(tmp_path):
    (tmp_path / "data").mkdir()
    pq.write_table(pa.table({"body": [PROSE]}), tmp_path / "data/docs.parquet")
    with pytest.raises(ValueError, match=r"^docs\.parquet: no column 'text' \(found: body\); "
                                         r"set ingest\.sources\[0\]\.text_field"):
        ingest(tmp_path / "data", tmp_path / "out", [{"path": "docs.parquet", "format": "parquet"}])
    assert not list((tmp_path / "out").glob("documents/*.parquet"))


def test_parquet_null_text_fails_naming_the_row_or_is_skipped(tmp_path):
    (tmp_path / "data").mkdir()
    pq.write_table(pa.table({"text": [PROSE, None, OTHER]}), tmp_path / "data/docs.parquet")
    source = [{"path": "docs.parquet", "format": "parquet"}]
    with pytest.raises(ValueError, match=r"^docs\.parquet:2: text field 'text' is null"):
        ingest(tmp_path / "data", tmp_path / "out", source)
    metrics = ingest(tmp_path / "data", tmp_path / "skip", source, on_error="skip")
    assert metrics["skipped_records"] == 1 and metrics["documents_out"] == 2


def test_parquet_binary_text_column_follows_the_invalid_utf8_policy(tmp_path):
    (tmp_path / "data").mkdir()
    pq.write_table(pa.table({"text": pa.array([PROSE.encode(), b"caf\xe9 " + OTHER.encode()],
                                              type=pa.binary())}),
                   tmp_path / "data/docs.parquet")
    source = [{"path": "docs.parquet", "format": "parquet"}]
    replaced = ingest(tmp_path / "data", tmp_path / "replace", source)
    assert replaced["invalid_utf8_replaced"] == 1
    assert [row["text"] for row in documents(tmp_path / "replace")] == [
        PROSE, "caf\ufffd " + OTHER]
    with pytest.raises(ValueError, match=r"^docs\.parquet:2: 1 byte\(s\) of field 'text' "
                                         r"that are not valid UTF-8"):
        ingest(tmp_path / "data", tmp_path / "fail", source, invalid_utf8="fail",
               on_error="skip")


def test_a_file_that_is_not_parquet_names_the_file(tmp_path):
    write(tmp_path / "data/docs.parquet", PROSE)
    with pytest.raises(ValueError, match=r"^docs\.parquet: cannot be read after line 0"):
        ingest(tmp_path / "data", tmp_path / "out", [{"path": "docs.parquet", "format": "parquet"}])


# --- Hugging Face datasets ----------------------------------------------------------------

def test_huggingface_save_to_disk_dataset_and_dataset_dict(tmp_path):
    rows = {"text": [PROSE, OTHER], "label": [0, 1]}
    datasets.Dataset.from_dict(rows).save_to_disk(tmp_path / "data/plain_ds")
    datasets.DatasetDict({"train": datasets.Dataset.from_dict({"text": [PROSE]}),
                          "test": datasets.Dataset.from_dict(rows)}
                         ).save_to_disk(tmp_path / "data/dict_ds")
    metrics = ingest(tmp_path / "data", tmp_path / "out",
                     [{"path": "plain_ds", "format": "huggingface"}])
    assert located(tmp_path / "out") == [("plain_ds:1", PROSE, '{"label": 0}'),
                                         ("plain_ds:2", OTHER, '{"label": 1}')]
    assert metrics["bytes_in"] == len(PROSE) + len(OTHER)
    ingest(tmp_path / "data", tmp_path / "test",
           [{"path": "dict_ds", "format": "huggingface", "hf_split": "test"}])
    assert [row["text"] for row in documents(tmp_path / "test")] == [PROSE, OTHER]


def test_huggingface_missing_split_or_column_names_the_key(tmp_path):
    datasets.DatasetDict({"train": datasets.Dataset.from_dict({"body": [PROSE]})}
                         ).save_to_disk(tmp_path / "data/ds")
    with pytest.raises(ValueError, match=r"^ds: no split 'validation' \(splits: train\); "
                                         r"set ingest\.sources\[0\]\.hf_split"):
        ingest(tmp_path / "data", tmp_path / "out",
               [{"path": "ds", "format": "huggingface", "hf_split": "validation"}])
    with pytest.raises(ValueError, match=r"^ds: no column 'text' \(found: body\)"):
        ingest(tmp_path / "data", tmp_path / "out", [{"path": "ds", "format": "huggingface"}])
    (tmp_path / "data/not_a_dataset").mkdir()
    with pytest.raises(ValueError, match=r"^not_a_dataset: not a datasets\.save_to_disk "
                                         r"directory"):
        ingest(tmp_path / "data", tmp_path / "out",
               [{"path": "not_a_dataset", "format": "huggingface"}])


def test_huggingface_hub_name_goes_to_load_dataset(tmp_path, monkeypatch):
    # Offline mode (as HF_HUB_OFFLINE=1 sets it) makes the Hub path fail at once instead of
    # retrying DNS for 25 s; the error must still say what was tried and what to do. The
    # flag is this process's: keep the read here even when the session's Ray is up.
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    (tmp_path / "data").mkdir()
    with run_in_process(), pytest.raises(ValueError, match=r"ingest\.sources\[0\]\.path = 'someone/corpus' is not "
                                         r"a directory under data_dir, and datasets\.load_dataset "
                                         r"could not load it from the Hugging Face Hub"):
        ingest(tmp_path / "data", tmp_path / "out",
               [{"path": "someone/corpus", "format": "huggingface"}])
