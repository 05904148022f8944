"""A driver whose object-store lease was taken over while its stage ran does not commit
the stage (pipeline.runner checks the lease right before the manifest; issue 31), on a
real S3 server on loopback (moto's, over HTTP) with a plain stage function and no Ray.

While `ingest` runs, another driver takes its lease over (as it would after the first
driver fell silent for longer than writer_lock.STALE_SECONDS: a conditional rewrite of
the lease object); the first driver's heartbeat then fails. The stage function itself
finishes normally: only the lease check stands between it and a commit, since the new
holder has not committed yet and the manifest key is still free."""

from __future__ import annotations

import time

import pytest

import storage.object_lease as object_lease
from pipeline.config import load_config
from pipeline.planner import Selection
from pipeline.runner import run_pipeline
from storage.artifact_store import open_store
from storage.object_lease import ObjectLease, peek_lease
from storage.writer_lock import StageLocked
from tests.support.s3_server import make_bucket


def test_a_driver_that_lost_its_lease_while_the_stage_ran_does_not_commit_it(s3_endpoint, tmp_path, monkeypatch):
    monkeypatch.setenv("PRETRAIN_MIRROR", str(tmp_path / "mirror"))
    monkeypatch.setattr(object_lease, "HEARTBEAT_SECONDS", 0.2)  # notice the loss within the test
    url = f"{make_bucket('lease-lost')}/runs/x"
    (tmp_path / "data").mkdir()
    config_file = tmp_path / "experiment.yaml"
    config_file.write_text(f"name: unit\ndata_dir: {tmp_path / 'data'}\n"
                           "ingest:\n  sources:\n    - path: corpus/*.txt\n")
    said: list[str] = []
    takers: list[ObjectLease] = []

    def load_stage(spec):
        def stage(ctx):
            (ctx.output_dir / "out.txt").write_text(spec.name)
            store = open_store(url)
            taker = ObjectLease(store.fs, store.lease_key(spec.name, ctx.fingerprint), what="the other driver",
                                stale_seconds=-1, echo=lambda *_: None)  # finds this driver's lease stale
            taker.acquire()
            takers.append(taker)
            deadline = time.monotonic() + 60
            while not any("lost the lease" in line for line in said):
                assert time.monotonic() < deadline, f"the heartbeat never noticed the take-over: {said}"
                time.sleep(0.05)
            return {"value": 1}

        return stage

    cfg = load_config(config_file, [f"workdir={url}"])
    try:
        with pytest.raises(StageLocked, match=r"stage 'ingest' .* was taken over by another driver while this "
                                              r"one ran; its output is not committed"):
            run_pipeline(cfg, Selection(), echo=said.append, load_stage=load_stage, use_ray=False)
        assert len(takers) == 1  # the first stage ran, and the run stopped there
        store = open_store(url)
        fingerprint = next(line for line in said if line.startswith("[ingest] running")).split("(")[1].split(")")[0]
        assert store.manifest("ingest", fingerprint) is None
        assert not store.is_finished("ingest", fingerprint)
        # The new holder's lease is left as it is (the old holder's release is fenced).
        assert peek_lease(store.fs, store.lease_key("ingest", fingerprint)) is not None
    finally:
        for taker in takers:
            taker.release()
