"""The engine with an object-store workdir (s3://bucket/prefix) on a real S3 server on
loopback (moto's, over HTTP; boto3, s3fs and pyarrow unmocked), with plain stage
functions and no Ray: outputs and the run's index land in the bucket, a machine with
nothing local reuses them, status/plan/verify read the bucket, and of two drivers on
one prefix only one writes a stage (the other is refused, or waits and reuses it)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cluster.cli import main
from pipeline.config import load_config
from pipeline.graph import STAGE_NAMES
from pipeline.planner import Selection, plan
from pipeline.runner import StageFailed, run_pipeline
from pipeline.status import render, stage_rows
from tests.support.s3_server import SERVER_ENV, make_bucket

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def bucket(s3_endpoint, tmp_path, monkeypatch) -> str:
    monkeypatch.setenv("PRETRAIN_MIRROR", str(tmp_path / "mirror"))
    return make_bucket("engine-test")


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    (tmp_path / "data").mkdir()
    path = tmp_path / "experiment.yaml"
    path.write_text(f"name: unit\ndata_dir: {tmp_path / 'data'}\n"
                    "ingest:\n  sources:\n    - path: corpus/*.txt\n")
    return path


class FakeStages:
    """Stage functions that write one file each and check their inputs' files are local."""

    def __init__(self, fail: dict[str, BaseException] | None = None):
        self.calls: list[str] = []
        self.fail = fail or {}

    def __call__(self, spec):
        def stage(ctx):
            self.calls.append(spec.name)
            assert ctx.output_url and ctx.output_url.startswith("s3://")
            (ctx.output_dir / "out.txt").write_text(f"{spec.name} {ctx.fingerprint}")
            for name, directory in ctx.inputs.items():
                assert (directory / "manifest.json").is_file(), f"{name} unfinished"
                assert (directory / "out.txt").read_text() == f"{name} {ctx.input_manifests[name]['fingerprint']}"
            if spec.name in self.fail:
                raise self.fail[spec.name]
            return {"value": len(self.calls)}

        return stage


def run(config_file: Path, stages: FakeStages, overrides=(), **selection):
    cfg = load_config(config_file, list(overrides))
    return run_pipeline(cfg, Selection(**selection), echo=lambda *_: None, load_stage=stages, use_ray=False)


def objects(url: str) -> dict[str, bytes]:
    """Every object under `url`, read straight from the server."""
    import boto3

    bucket, _, prefix = url[len("s3://"):].partition("/")
    client = boto3.client("s3")
    keys = [item["Key"] for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
            for item in page.get("Contents", [])]
    return {key: client.get_object(Bucket=bucket, Key=key)["Body"].read() for key in keys}


def test_a_run_lands_in_the_bucket_and_a_machine_with_nothing_local_reuses_it(bucket, config_file, tmp_path,
                                                                                capsys):
    url = f"{bucket}/runs/x"
    overrides = [f"workdir={url}"]
    stages = FakeStages()
    run(config_file, stages, overrides)
    assert stages.calls == list(STAGE_NAMES)
    cfg = load_config(config_file, overrides)
    assert cfg.resolved_workdir.is_relative_to(tmp_path / "mirror")
    assert not (tmp_path / "s3:").exists() and not (REPO_ROOT / "s3:").exists()

    stored = objects(url)
    for decision in plan(cfg):
        assert decision.action == "cached", decision
        prefix = f"runs/x/{decision.stage}/{decision.fingerprint}/"
        assert stored[prefix + "out.txt"] == f"{decision.stage} {decision.fingerprint}".encode()
        assert json.loads(stored[prefix + "manifest.json"])["fingerprint"] == decision.fingerprint
    index = json.loads(stored["runs/x/pipeline.json"])
    assert index["name"] == "unit" and set(index["stages"]) == set(STAGE_NAMES)
    assert "runs/x/config.resolved.yaml" in stored
    assert not any(".lock" in key for key in stored)  # every lease released
    # No credential is written anywhere: manifests record argv, host and libraries, not the environment.
    for secret in (SERVER_ENV["AWS_SECRET_ACCESS_KEY"], SERVER_ENV["AWS_ACCESS_KEY_ID"]):
        leaked = [key for key, data in stored.items() if secret.encode() in data]
        assert not leaked, (secret, leaked)

    # Another machine: its mirror is empty. Everything is cached from the bucket alone.
    shutil.rmtree(tmp_path / "mirror")
    assert {d.action for d in plan(cfg)} == {"cached"}
    stages.calls.clear()
    result = run(config_file, stages, overrides)
    assert stages.calls == [] and {d.action for d in result.decisions} == {"cached"}
    # ... and a changed stage runs there, on its input fetched from the bucket (FakeStages checks).
    shutil.rmtree(tmp_path / "mirror")
    run(config_file, stages, [*overrides, "pretrain.lr=0.002"])
    assert stages.calls == ["pretrain", "finetune", "evaluate", "report"]
    dataset_fp = next(d.fingerprint for d in plan(cfg) if d.stage == "dataset")
    assert (cfg.resolved_store / "dataset" / dataset_fp / "out.txt").is_file()

    # status, plan and verify read the bucket, from a machine with nothing local again.
    shutil.rmtree(tmp_path / "mirror")
    table = render(url)
    rows = [line for line in table.splitlines()[3:] if line.strip()]  # after state, header, dashes
    assert len(rows) == len(STAGE_NAMES) and all(" done " in row for row in rows), table
    capsys.readouterr()
    assert main(["status", url]) == 0
    assert main(["plan", str(config_file), "-o", f"workdir={url}", "-o", "pretrain.lr=0.002"]) == 0
    out = capsys.readouterr().out
    assert f"workdir {url}" in out
    assert out.count(" cached ") == len(STAGE_NAMES), out
    assert main(["verify", url]) == 0
    assert not (Path.cwd() / "s3:").exists()

    # report and dashboard read the run from the bucket too (what `pretrain report URL`
    # and `pretrain dashboard URL` load): every stage done, its files fetched to read.
    from views.compare import write_comparison
    from views.run_source import load_run_source

    shutil.rmtree(tmp_path / "mirror")
    source = load_run_source(url)
    assert source.name == "unit" and [s.state for s in source.stages] == ["done"] * len(STAGE_NAMES)
    for record in source.stages:
        assert (record.directory / "out.txt").read_text().startswith(record.stage)
    assert source.config.get("name") == "unit"
    report_dir = write_comparison([url], str(tmp_path / "compare"))
    assert "unit" in (report_dir / "report.html").read_text()


def test_a_failed_stage_is_failed_in_the_bucket_and_the_rerun_completes(bucket, config_file, tmp_path):
    url = f"{bucket}/runs/f"
    overrides = [f"workdir={url}"]
    stages = FakeStages(fail={"dataset": ValueError("bad shard 3")})
    with pytest.raises(StageFailed, match="bad shard 3"):
        run(config_file, stages, overrides)
    assert not any(key.startswith("runs/f/dataset/") and key.endswith("manifest.json") for key in objects(url))
    shutil.rmtree(tmp_path / "mirror")  # seen from another machine
    rows = {r["stage"]: r for r in stage_rows(url)}
    assert rows["tokenizer"]["state"] == "done"
    assert rows["dataset"]["state"] == "failed" and "bad shard 3" in rows["dataset"]["metrics"]["error"]
    assert rows["pretrain"]["state"] == "not run"
    dataset = next(d for d in plan(load_config(config_file, overrides)) if d.stage == "dataset")
    assert dataset.action == "run" and "failed last time" in dataset.reason
    stages.fail.clear()
    stages.calls.clear()
    run(config_file, stages, overrides)
    assert stages.calls == ["dataset", "pretrain", "finetune", "evaluate", "report"]
    assert {r["state"] for r in stage_rows(url)} == {"done"}


# A driver in its own process: the real CLI (`pipeline.cli.main`: argument parsing, exit
# codes, --wait-lock) with plain stage functions and no Ray. Its `report` stage (the last)
# announces itself and then waits for a file to appear, so the test controls when it ends.
DRIVER = """
import functools, os, sys, time
from pathlib import Path
import pipeline.runner as runner
from cluster.cli import main

gates = Path(sys.argv[1])

def load_stage(spec):
    def stage(ctx):
        (ctx.output_dir / "out.txt").write_text(f"{spec.name} {ctx.fingerprint}")
        if spec.name == "report":
            (gates / f"report-started-{os.getpid()}").write_text("")
            deadline = time.time() + 60
            while not (gates / "go").exists() and time.time() < deadline:
                time.sleep(0.05)
        return {"pid": os.getpid()}
    return stage

runner.run_pipeline = functools.partial(runner.run_pipeline, load_stage=load_stage, use_ray=False)
sys.exit(main(sys.argv[2:]))
"""


def start_driver(script: Path, gates: Path, mirror: Path, log: Path, *args: str) -> subprocess.Popen:
    env = {**os.environ, "PRETRAIN_MIRROR": str(mirror), "PYTHONUNBUFFERED": "1",
           "PYTHONPATH": os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH")) if p)}
    return subprocess.Popen([sys.executable, str(script), str(gates), *args], cwd=REPO_ROOT, env=env,
                            stdout=open(log, "w"), stderr=subprocess.STDOUT)


def wait_for(condition, what: str, timeout: float = 60) -> None:
    deadline = time.time() + timeout
    while not condition():
        if time.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def test_two_drivers_on_one_prefix_one_writes_the_other_is_refused_or_waits(bucket, config_file, tmp_path):
    import boto3

    name = bucket[len("s3://"):]
    client = boto3.client("s3")
    # Versioning counts every PUT of the manifest key: exactly one commit must happen.
    client.put_bucket_versioning(Bucket=name, VersioningConfiguration={"Status": "Enabled"})
    url = f"{bucket}/runs/two"
    script, gates = tmp_path / "driver.py", tmp_path / "gates"
    script.write_text(DRIVER)
    gates.mkdir()
    args = ("run", str(config_file), "-o", f"workdir={url}")
    logs = {who: tmp_path / f"{who}.log" for who in ("first", "refused", "waiting")}
    processes = []
    try:
        # Three machines: each driver has its own mirror.
        first = start_driver(script, gates, tmp_path / "m1", logs["first"], *args)
        processes.append(first)
        wait_for(lambda: (gates / f"report-started-{first.pid}").exists() or first.poll() is not None,
                 "the first driver's report stage")
        assert first.poll() is None, logs["first"].read_text()

        refused = start_driver(script, gates, tmp_path / "m2", logs["refused"], *args)
        processes.append(refused)
        assert refused.wait(timeout=60) == 2, logs["refused"].read_text()
        said = logs["refused"].read_text()
        assert "error: stage 'report' " in said and f"is being written by pid {first.pid} on host" in said, said
        assert "--wait-lock" in said

        waiting = start_driver(script, gates, tmp_path / "m3", logs["waiting"], *args, "--wait-lock")
        processes.append(waiting)
        wait_for(lambda: "waiting for stage 'report'" in logs["waiting"].read_text() or waiting.poll() is not None,
                 "the second driver to wait for the lease")
        assert waiting.poll() is None, logs["waiting"].read_text()
        (gates / "go").write_text("")
        assert first.wait(timeout=60) == 0, logs["first"].read_text()
        assert waiting.wait(timeout=60) == 0, logs["waiting"].read_text()
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
    waited = logs["waiting"].read_text()
    assert "[report] cached" in waited and "finished by the run we waited for" in waited, waited
    started = sorted(p.name for p in gates.glob("report-started-*"))
    assert started == [f"report-started-{first.pid}"], started  # nobody else ran the stage

    cfg = load_config(config_file, [f"workdir={url}"])
    report_fp = next(d.fingerprint for d in plan(cfg) if d.stage == "report")
    key = f"runs/two/report/{report_fp}/manifest.json"
    versions = client.list_object_versions(Bucket=name, Prefix=key).get("Versions", [])
    assert len(versions) == 1, versions  # one commit, never overwritten
    manifest = json.loads(client.get_object(Bucket=name, Key=key)["Body"].read())
    assert manifest["metrics"]["pid"] == first.pid
    for stage in STAGE_NAMES:  # and every other stage was committed once too
        fp = next(d.fingerprint for d in plan(cfg) if d.stage == stage)
        prefix = f"runs/two/{stage}/{fp}/manifest.json"
        assert len(client.list_object_versions(Bucket=name, Prefix=prefix).get("Versions", [])) == 1, stage
