"""Large files cleaned in pieces (split_plan.py) give the same output as read whole: with
a block size of a few hundred bytes, every format is cut into many pieces, and the
shards (ids, source_line, metadata, order, row groups) and the metrics are the same
bytes and numbers as with splitting off. In this process, no Ray."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from stages.ingest.config import IngestConfig
from stages.ingest.file_pieces import WHOLE_FILE, FilePiece, GutenbergCut
from stages.ingest.sharding import ShardJob, ShardPiece, document_shards, write_shard
from stages.ingest.sources import resolve_sources
from stages.ingest.split_plan import plan_pieces
from stages.ingest.staging import DOCUMENT_SCHEMA
from stages.ray_tasks import map_tasks
from tests.unit.test_ingest_run import documents, ingest, write

BOOK = "corpus/gutenberg/The-Dunwich-Horror.txt"  # BOM, CRLF, Gutenberg header and licence
TINY_MB = 700 / 2**20  # 700-byte blocks


def plan(data_dir: Path, sources: list[dict], block_size_mb: float | None = TINY_MB,
         **options) -> list[tuple[FilePiece, ...]]:
    config = IngestConfig(sources=sources, block_size_mb=block_size_mb, **options)
    return plan_pieces(resolve_sources(config.sources, data_dir), config, map_tasks)


def pieces_per_file(data_dir: Path, sources: list[dict], **options) -> list[int]:
    return [len(pieces) for pieces in plan(data_dir, sources, **options)]


def assert_split_is_unsplit(data_dir: Path, out: Path, sources: list[dict],
                            block_size_mb: float = TINY_MB, **options) -> dict:
    """Ingest with splitting off and with tiny blocks; the same metrics and shard bytes."""
    whole = ingest(data_dir, out / "whole", sources, block_size_mb=None, **options)
    split = ingest(data_dir, out / "split", sources, block_size_mb=block_size_mb, **options)
    assert split == whole
    shards = [path.read_bytes() for path in document_shards(out / "whole")]
    assert [path.read_bytes() for path in document_shards(out / "split")] == shards
    assert whole["documents_out"] > 0
    return whole


def records_from(book: Path) -> list[list[str]]:
    """3 x 40 long paragraphs of the book, words reversed (new text, line breaks kept)."""
    text = book.read_text(encoding="utf-8-sig").replace("\r\n", "\n")
    paragraphs = [p for p in text.split("\n\n") if len(p) > 200][:120]
    reversed_words = [" ".join(reversed(p.split(" "))) for p in paragraphs]
    return [reversed_words[i:i + 40] for i in (0, 40, 80)]


def test_every_format_split_is_the_same_bytes_as_unsplit(data_dir, tmp_path):
    data = tmp_path / "data"
    book = (data_dir / BOOK).read_bytes()
    write(data / "book.txt", book[:book.index(b"\n", 20_000) + 1])  # ~30 pieces
    for_jsonl, for_csv, for_parquet = records_from(data_dir / BOOK)
    write(data / "records.jsonl", "".join(
        json.dumps({"text": p, "n": i}) + ("\n\n" if i % 7 == 0 else "\n")
        for i, p in enumerate(for_jsonl)))
    # Quoted cells spanning lines (CRLF inside and between records), doubled quotes, a
    # blank line, and a line that begins with a quote inside a cell: cuts must follow
    # the reader's state, not the look of a line.
    quoted = [p.replace('"', '""') for p in for_csv]
    cells = [f'"{p[:150]}\r\n""quoted"" line\n\n"" still inside\n{p[150:]}",{i}'
             for i, p in enumerate(quoted)]
    csv_text = ("text,n\r\n" + "\r\n".join(cells[:20]) + "\r\n\r\n" + "\n".join(cells[20:])
                + "\n")
    write(data / "rows.csv", csv_text)
    pq.write_table(pa.table({"text": for_parquet, "n": list(range(40))}),
                   data / "rows.parquet", row_group_size=3, compression="none")
    write(data / "blank.txt", "\r\n \n\t\r\n" * 200)  # split, and still one empty file
    sources = [{"path": "*.txt"}, {"path": "records.jsonl", "format": "jsonl"},
               {"path": "rows.csv", "format": "csv"},
               {"path": "rows.parquet", "format": "parquet"}]

    block = 1500 / 2**20
    pieces = pieces_per_file(data, sources, block_size_mb=block)
    assert pieces[0] == 1 and all(n >= 10 for n in pieces[1:]), pieces  # blank.txt: 1,200 B
    metrics = assert_split_is_unsplit(data, tmp_path, sources, block, dedup="near",
                                      num_shards=3)
    assert metrics["empty_files"] == 1 and metrics["num_files"] == 5
    assert [source["documents_out"] >= 20 for source in metrics["sources"].values()] == [
        True] * 4
    csv_rows = [row for row in documents(tmp_path / "split") if row["source"] == "rows.csv"]
    assert [row["source_line"] for row in csv_rows] == [
        1 + csv_text[:csv_text.index(cell)].count("\n") for cell in cells]
    assert '"quoted" line' in csv_rows[0]["text"]


def test_gutenberg_markers_in_other_pieces_are_stripped_as_unsplit(tmp_path):
    data = tmp_path / "data"
    # A header and a licence several pieces long each, CRLF, BOM.
    write(data / "pg.txt", "\ufeff" + "".join(
        f"Header paragraph {i} about the licence,\r\nwrapped.\r\n\r\n" for i in range(30))
        + "*** START OF THE PROJECT GUTENBERG EBOOK PG ***\r\n" + "".join(
        f"Body paragraph {i} of the book,\r\nwrapped.\r\n\r\n" for i in range(60))
        + "*** END OF THE PROJECT GUTENBERG EBOOK PG ***\r\n" + "".join(
        f"Licence paragraph {i},\r\nwrapped.\r\n\r\n" for i in range(60)))
    # More than 2000 lines without START: END still counts after line 2000 ...
    write(data / "long.txt", "".join(f"line {i} {'*' * (i % 5)}\n\n" for i in range(1100))
          + "*** END OF THE PROJECT GUTENBERG EBOOK X ***\nlicence text here\n")
    # ... but not in a file under 2000 lines, and START after line 2000 is no START.
    write(data / "short.txt", "a paragraph of prose, several pieces of it\n\n" * 60
          + "*** END OF THE PROJECT GUTENBERG EBOOK Y ***\n\nkept, as the unsplit read keeps it\n")
    write(data / "late.txt", "words\n\n" * 1001 + "*** START OF THE PROJECT GUTENBERG "
          "EBOOK Z ***\n\nafter the start\n\n*** END OF THE PROJECT GUTENBERG EBOOK Z ***\n")
    sources = [{"path": "*.txt"}]
    pieces = plan(data, [{"path": "pg.txt"}], strip_gutenberg=True)[0]
    start, end = 91, 272  # the marker lines
    assert pieces[0].gutenberg == GutenbergCut(start, end)
    assert max(p.index for p in pieces if p.first_line <= start) >= 2
    assert max(p.index for p in pieces if p.first_line <= end) <= len(pieces) - 3
    assert all(n >= 3 for n in pieces_per_file(data, sources, strip_gutenberg=True))

    metrics = assert_split_is_unsplit(data, tmp_path, sources, strip_gutenberg=True,
                                      min_chars=1, dedup="none")
    # pg: its header and licence; long: its last 2 lines; late: its last line.
    assert metrics["gutenberg_lines_stripped"] == start + 181 + 2 + 1
    texts = [row["text"] for row in documents(tmp_path / "split")]
    assert "kept, as the unsplit read keeps it" in texts and "licence text here" not in texts
    assert "*** START OF THE PROJECT GUTENBERG EBOOK Z ***" in texts
    assert not any("Header" in text or "Licence" in text or "EBOOK PG" in text
                   for text in texts)
    assert sum(text.startswith("Body paragraph") for text in texts) == 60
    # Split by line too (any line is a cut).
    line_sources = [{"path": "pg.txt", "split": "line"}]
    assert_split_is_unsplit(data, tmp_path / "lines", line_sources, strip_gutenberg=True)


def test_an_error_in_the_third_piece_names_the_true_line(tmp_path):
    good = '{"text": "a record long enough to be kept, number %d"}\r\n'
    lines = [good % i for i in range(200)]
    lines[150] = '{"text": "unclosed\r\n'
    write(tmp_path / "data/bad.jsonl", "".join(lines))
    write(tmp_path / "data/bad.csv", "text,n\n" + "".join(
        f'"row {i}\nsecond line of row {i}",{i}\n' if i != 120 else f"row {i},1,2\n"
        for i in range(200)))
    write(tmp_path / "data/bad.txt", b"".join(
        b"paragraph %d of the text\n\n" % i if i != 160 else b"bad \xff byte\n\n"
        for i in range(200)))
    for name, format, line, options in (
            ("bad.jsonl", "jsonl", 151, {}), ("bad.csv", "csv", 242, {}),
            ("bad.txt", "text", 321, {"invalid_utf8": "fail"})):
        sources = [{"path": name, "format": format}]
        pieces = plan(tmp_path / "data", sources)[0]
        assert max(p.index for p in pieces if p.first_line <= line) >= 2, name  # 3rd or later
        errors = []
        for block in (None, TINY_MB):
            with pytest.raises(ValueError) as error:
                ingest(tmp_path / "data", tmp_path / "out", sources, block_size_mb=block,
                       **options)
            errors.append(str(error.value))
        assert errors[0].startswith(f"{name}:{line}: "), errors[0]
        assert errors[1] == errors[0]


def test_unreadable_piece_skips_the_whole_file_as_unsplit(tmp_path):
    """on_error: skip drops a file that cannot be read whole, even when only one piece
    of it fails; counts (skipped_files, bytes_in) are the unsplit read's."""
    table = pa.table({"text": [f"row {i} of a table, long enough to keep" for i in range(60)]})
    pq.write_table(table, tmp_path / "data.parquet", row_group_size=6, compression="none")
    data = bytearray((tmp_path / "data.parquet").read_bytes())
    chunk = pq.ParquetFile(tmp_path / "data.parquet").metadata.row_group(6).column(0)
    data[chunk.data_page_offset:chunk.data_page_offset + 8] = b"\xff" * 8  # page header
    write(tmp_path / "data/broken.parquet", bytes(data))
    write(tmp_path / "data/fine.txt", "a fine paragraph of text, long enough\n")
    sources = [{"path": "broken.parquet", "format": "parquet"}, {"path": "fine.txt"}]
    pieces = plan(tmp_path / "data", sources)[0]
    assert next(p.index for p in pieces if 6 in p.row_groups) >= 2

    whole = ingest(tmp_path / "data", tmp_path / "whole", sources, on_error="skip")
    split = ingest(tmp_path / "data", tmp_path / "split", sources, on_error="skip",
                   block_size_mb=TINY_MB)
    # bytes_in of a file skipped as unreadable counts what was read before the failure:
    # buffering and batching decide that, whole or in pieces.
    for metrics in (whole, split):
        metrics["bytes_in"] -= metrics["sources"]["ingest.sources[0]"].pop("bytes_in")
    assert split == whole
    assert [p.read_bytes() for p in document_shards(tmp_path / "split")] == [
        p.read_bytes() for p in document_shards(tmp_path / "whole")]
    assert whole["skipped_files"] == 1 and whole["empty_files"] == 0
    assert whole["sources"]["ingest.sources[0]"]["documents_in"] == 0
    with pytest.raises(ValueError, match=r"broken\.parquet: cannot be read after line"):
        ingest(tmp_path / "data", tmp_path / "fail", sources, block_size_mb=TINY_MB)


def test_files_that_are_not_split(tmp_path):
    records = "".join(json.dumps({"text": f"record {i} " * 20}) + "\n" for i in range(50))
    write(tmp_path / "data/packed.jsonl.gz", gzip.compress(records.encode()))
    write(tmp_path / "data/one-line.jsonl", json.dumps({"text": "word " * 2000}))
    write(tmp_path / "data/whole.txt", "paragraph\n\n" * 500)
    write(tmp_path / "data/small.jsonl", records[:records.index("\n", 300) + 1])
    sources = [{"path": "packed.jsonl.gz", "format": "jsonl"},  # compressed: cannot seek
               {"path": "one-line.jsonl", "format": "jsonl"},   # no line start to cut at
               {"path": "whole.txt", "split": "file"},          # one document
               {"path": "small.jsonl", "format": "jsonl"}]      # under the block size
    assert plan(tmp_path / "data", sources) == [(WHOLE_FILE,)] * 4
    assert_split_is_unsplit(tmp_path / "data", tmp_path, sources)
    write(tmp_path / "data/big.jsonl", records)
    big = [{"path": "big.jsonl", "format": "jsonl"}]
    assert pieces_per_file(tmp_path / "data", big) == [len(records) // 700 + 1]
    for off in (0, None):
        assert plan(tmp_path / "data", big, block_size_mb=off) == [(WHOLE_FILE,)]


def test_a_file_staged_in_pieces_writes_the_row_groups_of_the_file_staged_whole(tmp_path):
    def rows(source: str, start: int, count: int) -> pa.Table:
        texts = [f"document {i} of {source}" for i in range(start, start + count)]
        return pa.table({"id": [f"{source}:{i}" for i in range(start, start + count)],
                         "text": texts, "sentences": [[t] for t in texts],
                         "source": [source] * count,
                         "source_line": list(range(start, start + count)),
                         "metadata": [None] * count}, schema=DOCUMENT_SCHEMA)

    def shard(name: str, tables: list[pa.Table]) -> Path:
        pieces = []
        for i, table in enumerate(tables):
            pq.write_table(table, tmp_path / f"{name}-{i}.parquet")
            pieces.append(ShardPiece(str(tmp_path / f"{name}-{i}.parquet"),
                                     np.arange(table.num_rows)))
        write_shard(ShardJob(str(tmp_path / f"{name}.parquet"), tuple(pieces)))
        return tmp_path / f"{name}.parquet"

    a, b = rows("a", 0, 20_000), rows("b", 0, 100)
    whole = shard("whole", [a, b])
    split = shard("split", [a.slice(0, 5000), a.slice(5000, 9000), a.slice(14_000), b])
    assert split.read_bytes() == whole.read_bytes()
    metadata = pq.read_metadata(whole)
    assert [metadata.row_group(i).num_rows for i in range(metadata.num_row_groups)] == [
        8192, 8192, 3616, 100]
