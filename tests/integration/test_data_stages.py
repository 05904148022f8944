"""ingest -> tokenizer -> dataset on three real books, once in process and once as Ray
tasks on the shared local Ray: the outputs must be the same bytes."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from pipeline.context import StageContext
from stages.data.loader import PackedSequenceLoader
from stages.dataset.config import DatasetConfig
from stages.dataset.run import run as run_dataset
from stages.ingest.config import IngestConfig
from stages.ingest.run import run as run_ingest
from stages.ray_tasks import ray_is_up, run_in_process
from stages.tokenizer.config import TokenizerConfig
from stages.tokenizer.run import run as run_tokenizer

BOOKS = ["The-Dunwich-Horror.txt", "pg7700.txt", "From_Newton_to_Einstein_BenjaminHarrow.txt"]


def run_data_stages(data_dir: Path, workdir: Path) -> dict[str, dict]:
    experiment = SimpleNamespace(seed=0, data_dir=str(data_dir))
    dirs = {name: workdir / name for name in ("ingest", "tokenizer", "dataset")}
    for directory in dirs.values():
        directory.mkdir(parents=True)

    def ctx(name, config, inputs=()):
        return StageContext(name=name, config=config, experiment=experiment,
                            output_dir=dirs[name], inputs={i: dirs[i] for i in inputs})

    ingest = IngestConfig(sources=[{"path": f"corpus/gutenberg/{b}"} for b in BOOKS], num_shards=3)
    return {
        "ingest": run_ingest(ctx("ingest", ingest)),
        "tokenizer": run_tokenizer(ctx("tokenizer", TokenizerConfig(vocab_size=1024),
                                       ["ingest"])),
        "dataset": run_dataset(ctx("dataset", DatasetConfig(seq_len=64, max_tokens=50_000),
                                   ["ingest", "tokenizer"])),
    }


def output_files(workdir: Path) -> dict[str, bytes]:
    return {str(p.relative_to(workdir)): p.read_bytes() for p in sorted(workdir.rglob("*"))
            if p.is_file() and p.name != "metrics.jsonl"}


@pytest.mark.ray
def test_ray_tasks_write_the_same_bytes_as_one_process(ray_session, data_dir, tmp_path):
    with run_in_process():
        assert not ray_is_up()
        local = run_data_stages(data_dir, tmp_path / "local")
    assert ray_is_up()
    distributed = run_data_stages(data_dir, tmp_path / "ray")

    assert output_files(tmp_path / "ray") == output_files(tmp_path / "local")
    for stage in ("ingest", "dataset"):
        numbers = {k: v for k, v in local[stage].items() if k != "tokens_per_second"}
        assert {k: distributed[stage][k] for k in numbers} == numbers
    assert local["ingest"]["dropped_duplicate"] > 20  # licence paragraphs of 3 PG books
    assert local["dataset"]["train_tokens"] == 782 * 64  # ceil(50_000 / 64) rows

    loader = PackedSequenceLoader(tmp_path / "ray/dataset", "train", batch_size=8, seed=0)
    assert next(loader).shape == (8, 64)


@pytest.mark.ray
def test_a_task_error_reaches_the_caller_as_itself(ray_session, tmp_path):
    (tmp_path / "bad.jsonl").write_text('{"text": "a fine first line"}\n{"text": oops}\n')
    config = IngestConfig(sources=[{"path": "bad.jsonl", "format": "jsonl"}])
    ctx = StageContext(name="ingest", config=config, output_dir=tmp_path / "out",
                       experiment=SimpleNamespace(seed=0, data_dir=str(tmp_path)))
    assert ray_is_up()
    with pytest.raises(ValueError, match=r"^bad\.jsonl:2: not valid JSON"):
        run_ingest(ctx)
