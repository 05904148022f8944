"""The object-store workdir on a file system that is not S3 (fsspec's memory://, in this
process): the generic path of storage.object_keys (exclusive "xb" create for the
manifest and the lease, no If-Match) runs the engine, reuses from the store alone,
refuses a second commit and a second writer. What gs:// (gcsfs) or any other fsspec file
system goes through."""

from __future__ import annotations

import shutil
from pathlib import Path

import fsspec
import pytest

from pipeline.config import load_config
from pipeline.graph import STAGE_NAMES
from pipeline.planner import Selection, plan
from pipeline.runner import run_pipeline
from pipeline.status import stage_rows
from storage.artifact_store import open_store
from storage.local_store import StageCommitConflict
from storage.writer_lock import StageLocked


@pytest.fixture
def url(tmp_path, monkeypatch, request) -> str:
    monkeypatch.setenv("PRETRAIN_MIRROR", str(tmp_path / "mirror"))
    location = f"memory://fsspec-store/{request.node.name}"
    yield location
    fsspec.filesystem("memory").rm(location[len("memory://"):], recursive=True)


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    (tmp_path / "data").mkdir()
    path = tmp_path / "experiment.yaml"
    path.write_text(f"name: generic\ndata_dir: {tmp_path / 'data'}\ningest:\n  sources:\n    - path: corpus/*.txt\n")
    return path


def run(config_file, url, calls):
    def load_stage(spec):
        def stage(ctx):
            calls.append(spec.name)
            (ctx.output_dir / "out.txt").write_text(spec.name)
            for name, directory in ctx.inputs.items():
                assert (directory / "out.txt").read_text() == name  # fetched from the store
            return {}
        return stage

    cfg = load_config(config_file, [f"workdir={url}"])
    return run_pipeline(cfg, Selection(), echo=lambda *_: None, load_stage=load_stage, use_ray=False)


def test_a_non_s3_store_runs_reuses_and_refuses_double_writes(config_file, url, tmp_path):
    calls = []
    run(config_file, url, calls)
    assert calls == list(STAGE_NAMES)
    fs = fsspec.filesystem("memory")
    root = url[len("memory://"):]
    assert len(fs.glob(f"{root}/*/*/manifest.json")) == len(STAGE_NAMES)
    assert not fs.glob(f"{root}/*/.*.lock")  # every lease released

    shutil.rmtree(tmp_path / "mirror")  # another machine: nothing local
    calls.clear()
    run(config_file, url, calls)
    assert calls == []
    cfg = load_config(config_file, [f"workdir={url}"])
    assert {d.action for d in plan(cfg)} == {"cached"}
    assert {r["state"] for r in stage_rows(url)} == {"done"}

    store = open_store(url)
    ingest = next(d for d in plan(cfg) if d.stage == "ingest")
    with pytest.raises(StageCommitConflict, match="already exists"):
        store.write_manifest("ingest", ingest.fingerprint, store.manifest("ingest", ingest.fingerprint))

    with store.lock("ingest", ingest.fingerprint, what="stage 'ingest'"):
        with pytest.raises(StageLocked, match="is being written by pid"):
            store.lock("ingest", ingest.fingerprint, what="stage 'ingest'").acquire()
        assert store.lock_holder("ingest", ingest.fingerprint) is not None
    assert store.lock_holder("ingest", ingest.fingerprint) is None
