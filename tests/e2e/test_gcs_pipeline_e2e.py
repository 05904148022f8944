"""The real CLI with its workdir in a gs:// bucket on a GCS emulator on loopback
(fake-gcs-server over HTTP; gcsfs and pyarrow's GcsFileSystem unmocked), on the session
Ray: the whole tiny pipeline, its later stages kept small.

What it pins: each stage's files and its manifest are in the bucket, committed through
the generation preconditions (storage.object_keys), and Ray Train's checkpoints too
(stages.training.launch.ray_storage); `status`, `plan` and a deep `verify` of the bucket
see every stage done, cached and intact; and from an empty machine (the mirror deleted)
the same command reuses every stage from the bucket."""

from __future__ import annotations

import json
import shutil

import pytest

from pipeline.graph import STAGE_NAMES
from storage.object_keys import filesystem
from tests.e2e.cli import REPO_ROOT, pretrain_cli
from tests.e2e.conftest import CONFIG
from tests.support.gcs_server import make_gcs_bucket

pytestmark = [pytest.mark.e2e, pytest.mark.ray]
STAGES = STAGE_NAMES


def test_the_tiny_pipeline_into_a_gcs_bucket_is_reused_from_it_on_an_empty_machine(
        gcs_endpoint, ray_address, tmp_path, monkeypatch):
    monkeypatch.setenv("PRETRAIN_MIRROR", str(tmp_path / "mirror"))  # read by the CLI (cli_env)
    url = f"{make_gcs_bucket('e2e-gcs-runs')}/gpt-tiny"
    fs, root = filesystem(url)
    args = (CONFIG, "-o", f"workdir={url}", "-o", f"ray.address={ray_address}",
            "-o", "finetune.num_workers=1", "-o", "finetune.max_train_examples=64",
            "-o", "evaluate.num_workers=1", "-o", "evaluate.tasks=[copa]", "-o", "evaluate.max_examples=4")

    first = pretrain_cli("run", *args, timeout=400)
    assert first.returncode == 0, first.stdout[-4000:] + first.stderr[-4000:]
    for stage in STAGES:
        assert f"[{stage}] done" in first.stdout, first.stdout[-3000:]
        (path,) = fs.glob(f"{root}/{stage}/*/manifest.json")
        manifest = json.loads(fs.cat_file(path))
        assert manifest["files"], manifest
        prefix = path.rsplit("/", 1)[0]
        for entry in manifest["files"]:  # every file it lists, at its size
            assert fs.info(f"{prefix}/{entry['path']}")["size"] == entry["bytes"], entry
    assert fs.glob(f"{root}/pretrain/*/ray/pretrain/checkpoint-step*/*")  # Ray Train's, in the bucket
    assert fs.exists(f"{root}/pipeline.json")
    assert not any(fs.glob(f"{root}/{stage}/.*.lock") for stage in STAGES)
    assert not (REPO_ROOT / "gs:").exists()  # nothing in a local folder named like the URL

    shutil.rmtree(tmp_path / "mirror")  # another machine: nothing local
    status = pretrain_cli("status", url)
    assert status.returncode == 0, status.stdout[-3000:] + status.stderr[-3000:]
    rows = {line.split()[0]: line for line in status.stdout.splitlines()[2:] if line.strip()}
    assert all(" done " in rows[stage] for stage in STAGES), status.stdout
    plan = pretrain_cli("plan", *args)
    assert plan.returncode == 0, plan.stdout[-3000:] + plan.stderr[-3000:]
    lines = {line.split()[0]: line for line in plan.stdout.splitlines()[2:] if line.strip()}
    assert all("cached" in lines[stage] for stage in STAGES), plan.stdout
    verify = pretrain_cli("verify", url)
    assert verify.returncode == 0 and verify.stdout.count(" ok") == len(STAGES), verify.stdout[-3000:]

    shutil.rmtree(tmp_path / "mirror", ignore_errors=True)  # what status and plan fetched
    second = pretrain_cli("run", *args, timeout=300)
    assert second.returncode == 0, second.stdout[-4000:] + second.stderr[-4000:]
    for stage in STAGES:
        assert f"[{stage}] cached" in second.stdout, second.stdout[-3000:]
    assert "running" not in second.stdout, second.stdout[-3000:]
    assert len(fs.glob(f"{root}/*/*/manifest.json")) == len(STAGES)  # nothing committed twice
