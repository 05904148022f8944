"""Large files split on Ray: the range scans and the pieces run as Ray Data maps on the
session's two workers, and the output is the same bytes as the unsplit read in one
process (tests/unit/test_split_ingest.py checks every case without Ray)."""

from __future__ import annotations

import json

import pytest

from stages.ingest.sharding import document_shards
from stages.ray_tasks import ray_is_up, run_in_process
from tests.unit.test_ingest_run import ingest, write


@pytest.mark.ray
def test_split_files_on_ray_are_the_same_bytes_as_unsplit_in_one_process(ray_session,
                                                                         tmp_path):
    data = tmp_path / "data"
    write(data / "book.txt", "Header line\r\n\r\n*** START OF THE PROJECT GUTENBERG EBOOK B ***"
          "\r\n" + "".join(f"Paragraph {i} of the book,\r\nwrapped.\r\n\r\n" for i in range(80))
          + "*** END OF THE PROJECT GUTENBERG EBOOK B ***\r\nLicence\r\n")
    write(data / "records.jsonl", "".join(json.dumps({"text": f"record {i} " * 8, "n": i})
                                          + "\n" for i in range(60)))
    write(data / "rows.csv", "text,n\n" + "".join(f'"row {i},\nits second line",{i}\n'
                                                  for i in range(80)))
    sources = [{"path": "book.txt"}, {"path": "records.jsonl", "format": "jsonl"},
               {"path": "rows.csv", "format": "csv"}]
    options = {"strip_gutenberg": True, "dedup": "near", "num_shards": 2}
    with run_in_process():
        whole = ingest(data, tmp_path / "whole", sources, block_size_mb=None, **options)
    assert ray_is_up()
    split = ingest(data, tmp_path / "split", sources, block_size_mb=1000 / 2**20, **options)

    assert split == whole and whole["documents_out"] == 80 + 60 + 80
    assert [p.read_bytes() for p in document_shards(tmp_path / "split")] == [
        p.read_bytes() for p in document_shards(tmp_path / "whole")]
