"""The whole tiny pipeline through the real CLI with its workdir in a bucket (a real S3
server on loopback: moto's, over HTTP; boto3, s3fs and pyarrow unmocked), on the
session Ray: the driver's process group is SIGKILLed mid-pretrain once a checkpoint is
committed in the bucket, this machine's mirror of the run is deleted (so nothing local
is left to resume from), and the rerun resumes pretrain from the bucket's checkpoint,
reuses the upstream stages from the bucket and finishes. Then 100 kB in the middle of the
mirror's copy of the weights are flipped (size and mtime kept), and `run --verify --only
evaluate --force evaluate` must score the bucket's weights, not that copy (issue 31).
Status and verify then read the run from the bucket alone.

The session Ray started before the S3 server, so its worker processes do not have
AWS_ENDPOINT_URL: Ray Train reaches the bucket through the pyarrow file system the
driver builds (stages.training.launch.ray_storage)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import time

import pytest

from pipeline.graph import STAGE_NAMES
from storage.mirror import mirror_dir
from storage.object_keys import filesystem
from tests.e2e.cli import REPO_ROOT, cli_command, cli_env, pretrain_cli
from tests.e2e.conftest import CONFIG
from tests.support.process_tree import kill_process_group
from tests.support.s3_server import make_bucket

pytestmark = [pytest.mark.e2e, pytest.mark.ray]
UPSTREAM_OF_PRETRAIN = ("ingest", "tokenizer", "dataset")


def committed_checkpoint(fs, root: str) -> bool:
    """Whether Ray Train has committed a checkpoint of pretrain in the bucket: a
    checkpoint-step* folder (stages/training/checkpoint.py) and the checkpoint manager's
    snapshot naming one."""
    objects = fs.find(f"{root}/pretrain")
    checkpoints = [o for o in objects if "/ray/" in o and "/checkpoint-step" in o]
    snapshots = [o for o in objects if o.endswith("/ray/pretrain/checkpoint_manager_snapshot.json")]
    return bool(checkpoints) and any(b"checkpoint-step" in fs.cat_file(s) for s in snapshots)


def trained_steps(mirror) -> list[int]:
    files = list(mirror.glob("pretrain/*/metrics.jsonl"))
    if not files:
        return []
    return [json.loads(line)["step"] for line in files[0].read_text().splitlines()
            if line.strip() and "loss" in json.loads(line)]


def flip_middle(path, count: int) -> None:
    """Invert `count` bytes in the middle of the file; its size and mtime stay."""
    stat = path.stat()
    data = bytearray(path.read_bytes())
    middle = len(data) // 2
    data[middle:middle + count] = bytes(b ^ 0xFF for b in data[middle:middle + count])
    path.write_bytes(bytes(data))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))


def test_a_bucket_run_killed_mid_pretrain_resumes_from_the_bucket_on_an_empty_machine(
        s3_endpoint, ray_address, tmp_path, monkeypatch):
    monkeypatch.setenv("PRETRAIN_MIRROR", str(tmp_path / "mirror"))  # read by the CLI (cli_env)
    url = f"{make_bucket('e2e-runs')}/gpt-tiny"
    fs, root = filesystem(url)
    mirror = mirror_dir(url)
    # The stages after pretrain small (one worker, a few examples): what is tested is
    # where their files go.
    args = (CONFIG, "-o", f"workdir={url}", "-o", f"ray.address={ray_address}",
            "-o", "finetune.num_workers=1", "-o", "finetune.max_train_examples=64",
            "-o", "evaluate.num_workers=1", "-o", "evaluate.tasks=[copa]", "-o", "evaluate.max_examples=4")
    log = tmp_path / "first.log"

    with open(log, "w") as handle:
        driver = subprocess.Popen(cli_command("run", *args), cwd=REPO_ROOT, env=cli_env(), stdout=handle,
                                  stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.time() + 400
        while True:
            if driver.poll() is not None:
                pytest.fail(f"driver exited before a checkpoint in the bucket:\n{log.read_text()[-3000:]}")
            if time.time() > deadline:
                pytest.fail(f"no checkpoint in {url} within 400 s:\n{log.read_text()[-3000:]}")
            steps = trained_steps(mirror)
            if steps and 10 <= steps[-1] < 30 and committed_checkpoint(fs, root):
                break
            time.sleep(0.2)
        kill_process_group(driver)
    finally:
        if driver.poll() is None:
            kill_process_group(driver)
    assert not fs.glob(f"{root}/pretrain/*/manifest.json")
    for stage in UPSTREAM_OF_PRETRAIN:
        assert fs.glob(f"{root}/{stage}/*/manifest.json"), (stage, log.read_text()[-3000:])
    # Nothing local is left: the rerun can only resume from the bucket.
    shutil.rmtree(mirror)

    # --wait-lock: the killed driver's lease is still in the bucket (it stops being live
    # when its heartbeat is older than storage.writer_lock.STALE_SECONDS).
    started = time.monotonic()
    rerun = pretrain_cli("run", *args, "--wait-lock", timeout=900)
    rerun_seconds = time.monotonic() - started
    assert rerun.returncode == 0, rerun.stdout[-4000:] + rerun.stderr[-4000:]
    for stage in UPSTREAM_OF_PRETRAIN:
        assert f"[{stage}] cached" in rerun.stdout, rerun.stdout[-3000:]
    assert "[pretrain] running" in rerun.stdout, rerun.stdout[-3000:]
    # The killed driver's lease is taken over, with a warning naming it.
    assert f"taking over the lease left by pid {driver.pid}" in rerun.stdout, rerun.stdout[-3000:]
    for stage in ("pretrain", "finetune", "evaluate", "report"):
        assert f"[{stage}] done" in rerun.stdout, rerun.stdout[-3000:]

    manifests = {}
    for stage in STAGE_NAMES:
        (path,) = fs.glob(f"{root}/{stage}/*/manifest.json")
        manifests[stage] = json.loads(fs.cat_file(path))
    pretrain = manifests["pretrain"]["metrics"]
    assert pretrain["resumed_from_step"] in (10, 20, 30), "the rerun did not resume from the bucket's checkpoint"
    assert pretrain["steps"] == 40
    files = {f["path"] for f in manifests["pretrain"]["files"]}
    assert "model/model.safetensors" in files and not any(p.startswith("ray/") for p in files)

    # A damaged copy of the weights in this machine's mirror (the bucket's intact), which
    # only its bytes tell apart: --verify must not let evaluate score it.
    pretrain_fp = manifests["pretrain"]["fingerprint"]
    weights = mirror / "pretrain" / pretrain_fp / "model" / "model.safetensors"
    flip_middle(weights, 100_000)
    again = pretrain_cli("run", *args, "--verify", "--only", "evaluate", "--force", "evaluate", timeout=600)
    assert again.returncode == 0, again.stdout[-4000:] + again.stderr[-4000:]
    assert "[evaluate] done" in again.stdout, again.stdout[-3000:]
    in_bucket = fs.cat_file(f"{root}/pretrain/{pretrain_fp}/model/model.safetensors")
    assert hashlib.sha256(weights.read_bytes()).digest() == hashlib.sha256(in_bucket).digest()
    (path,) = fs.glob(f"{root}/evaluate/*/manifest.json")
    evaluated = json.loads(fs.cat_file(path))
    assert evaluated["start_time"] > manifests["evaluate"]["end_time"]  # evaluated again
    # The same scores, example by example, as when the intact weights were scored.
    assert {k: v for k, v in evaluated["metrics"].items() if k != "seconds_scoring"} == \
        {k: v for k, v in manifests["evaluate"]["metrics"].items() if k != "seconds_scoring"}
    digests = {f["path"]: f["sha256"] for f in manifests["evaluate"]["files"]}
    assert {f["path"]: f["sha256"] for f in evaluated["files"]}["examples/copa.jsonl"] == digests["examples/copa.jsonl"]

    shutil.rmtree(mirror)  # status and verify from the bucket alone
    status = pretrain_cli("status", url)
    assert status.returncode == 0, status.stderr
    rows = [line for line in status.stdout.splitlines()[3:] if line.strip()]  # after state, header, dashes
    assert len(rows) == len(STAGE_NAMES) and all(" done " in row for row in rows), status.stdout
    verify = pretrain_cli("verify", url)
    assert verify.returncode == 0, verify.stdout[-3000:] + verify.stderr[-3000:]
    print(f"rerun took {rerun_seconds:.0f} s")
