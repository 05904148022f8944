"""Same inputs and config -> the same bytes, whatever the parallelism:

- ingest (every source format, near dedup, several shards) in one process vs on Ray (files
  cleaned concurrently as a Ray Data map on the session's two workers, finishing in any
  order), and the same error, type and message, when files are bad;
- tokenizer.json of BPE and Unigram trained as a Ray task with the `tokenizers` thread
  pool at 1 thread vs 2 threads (RAYON_NUM_THREADS; the trainers count and merge on
  threads). WordPiece training is not deterministic upstream (see the test).
"""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.context import StageContext
from stages.ingest.config import IngestConfig
from stages.ingest.run import run as run_ingest
from stages.ingest.sharding import document_shards
from stages.ray_tasks import ray_is_up, run_in_process
from stages.tokenizer.config import TokenizerConfig
from stages.tokenizer.run import TOKENIZER_FILE, TrainJob, train_tokenizer

BOOKS = ["The-Dunwich-Horror.txt", "pg7700.txt"]


def write_mixed_corpus(data_dir: Path, books_dir: Path) -> list[dict]:
    """Two real books as text, then their long paragraphs as records in gzipped JSONL, CSV
    and Parquet: each either copied (an exact duplicate), prefixed with a few words (a near
    duplicate) or with its words reversed (new text, kept with its metadata)."""
    data_dir.mkdir(parents=True)
    paragraphs = []
    for book in BOOKS:
        shutil.copy(books_dir / book, data_dir / book)
        text = (books_dir / book).read_text(encoding="utf-8-sig")
        paragraphs += [p for p in text.replace("\r\n", "\n").split("\n\n") if len(p) > 400]
    records = [[p, f"Copy number {i}. {p}", " ".join(reversed(p.split()))][i % 3]
               for i, p in enumerate(paragraphs)]
    third = len(records) // 3
    with gzip.open(data_dir / "records.jsonl.gz", "wt", encoding="utf-8") as stream:
        for i, record in enumerate(records[:third]):
            stream.write(json.dumps({"text": record, "n": i}) + "\n")
    cells = ['"' + record.replace('"', '""') + '",csv' for record in records[third:2 * third]]
    (data_dir / "rows.csv").write_text("text,kind\n" + "\n".join(cells) + "\n", encoding="utf-8")
    pq.write_table(pa.table({"text": records[2 * third:]}), data_dir / "rows.parquet",
                   row_group_size=20)
    return [{"path": "*.txt"}, {"path": "records.jsonl.gz", "format": "jsonl"},
            {"path": "rows.csv", "format": "csv"}, {"path": "rows.parquet", "format": "parquet"}]


def ingest(data_dir: Path, output_dir: Path, sources: list[dict]) -> dict:
    config = IngestConfig(sources=sources, dedup="near", num_shards=3)
    return run_ingest(StageContext(name="ingest", config=config, output_dir=output_dir,
                                   experiment=SimpleNamespace(seed=0, data_dir=str(data_dir))))


@pytest.mark.ray
def test_ingest_shards_are_the_same_bytes_in_one_process_and_on_ray(ray_session, data_dir,
                                                                     tmp_path):
    sources = write_mixed_corpus(tmp_path / "data", data_dir / "corpus/gutenberg")
    with run_in_process():
        local = ingest(tmp_path / "data", tmp_path / "local", sources)
    assert ray_is_up()
    distributed = ingest(tmp_path / "data", tmp_path / "ray", sources)

    assert distributed == local
    shards = [p.read_bytes() for p in document_shards(tmp_path / "local")]
    assert len(shards) == 3
    assert [p.read_bytes() for p in document_shards(tmp_path / "ray")] == shards
    # Every kind of duplicate was met, and every source format kept new text.
    filters = local["filters"]
    assert filters["exact_duplicate"]["documents"] > 10
    assert filters["near_duplicate"]["documents"] > 10
    assert all(source["documents_out"] > 10 for source in local["sources"].values())


@pytest.mark.ray
def test_bad_files_raise_the_same_exception_in_one_process_and_on_ray(ray_session, tmp_path):
    """Two bad files among good ones: the first bad one in corpus order is reported, as its
    own exception (not a Ray wrapper), and the worker's traceback comes with it."""
    fine = '{"text": "a fine line, long enough to be kept"}\n'
    (tmp_path / "data").mkdir()
    for name, text in (("a.jsonl", fine * 3), ("b.jsonl", fine * 2 + '{"text": oops}\n'),
                       ("c.jsonl", fine), ("d.jsonl", "[1, 2]\n")):
        (tmp_path / "data" / name).write_text(text, encoding="utf-8")
    sources = [{"path": "*.jsonl", "format": "jsonl"}]
    with run_in_process(), pytest.raises(ValueError) as local:
        ingest(tmp_path / "data", tmp_path / "local", sources)
    assert ray_is_up()
    with pytest.raises(ValueError) as distributed:
        ingest(tmp_path / "data", tmp_path / "ray", sources)

    assert str(local.value).startswith("b.jsonl:3: not valid JSON")
    assert type(distributed.value) is type(local.value)
    assert str(distributed.value) == str(local.value)
    assert any("Raised in a Ray Data worker" in note and "staging.py" in note
               for note in distributed.value.__notes__)


@pytest.fixture(scope="module")
def ingest_dir(data_dir, tmp_path_factory) -> Path:
    """The two books ingested once, in this process, for the tokenizer tests."""
    output_dir = tmp_path_factory.mktemp("ingest")
    with run_in_process():
        ingest(data_dir, output_dir, [{"path": f"corpus/gutenberg/{book}"} for book in BOOKS])
    return output_dir


# Not WordPiece: tokenizers' WordPiece trainer is not deterministic even in one process
# (huggingface/tokenizers#1794: the "##" pieces get ids in hash-map order, and those ids
# break ties between equally frequent merges; fix proposed upstream in PR #2066). Seen
# here as one differing tokenizer.json in a few runs; README "Known limitations".
@pytest.mark.ray
@pytest.mark.parametrize("kind", ["bpe", "unigram"])
def test_tokenizer_json_is_the_same_bytes_with_1_or_2_threads(ray_session, ingest_dir, kind,
                                                               tmp_path):
    outputs = []
    for threads in ("1", "2"):
        job = TrainJob(TokenizerConfig(kind=kind, vocab_size=2048),
                       [Path(p) for p in document_shards(ingest_dir)], 0, tmp_path / threads)
        # A fresh worker per setting: rayon sizes its pool once per process.
        remote = ray_session.remote(num_cpus=1, runtime_env={
            "env_vars": {"RAYON_NUM_THREADS": threads}})(train_tokenizer)
        metrics = ray_session.get(remote.remote(job))
        outputs.append(((tmp_path / threads / TOKENIZER_FILE).read_bytes(),
                        {k: v for k, v in metrics.items() if k != "train_seconds"}))
    assert outputs[0] == outputs[1]
    assert outputs[0][1]["vocab_size"] == 2048
