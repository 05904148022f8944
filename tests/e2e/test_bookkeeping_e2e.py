"""What a stage directory holds besides outputs, through the real CLI on a copy of the
finished run: a stage that fails on a full disk, where its failure record cannot be
written either, still says its own error; tracking files written after a stage's
manifest (wandb offline) never make it damaged."""

from __future__ import annotations

import json
import shutil

import pytest

from tests.e2e.cli import pretrain_cli
from tests.e2e.conftest import CONFIG
from tests.support.full_disk import full_file_system

pytestmark = [pytest.mark.e2e, pytest.mark.ray]


@pytest.fixture
def run_copy(finished_run, tmp_path):
    workdir, args, _ = finished_run
    copy = tmp_path / "gpt-tiny"
    shutil.copytree(workdir, copy, symlinks=True)
    return copy, (CONFIG, "-o", f"workdir={copy}", *args[3:])


def test_a_stage_failing_on_a_full_disk_says_its_error_and_why_there_is_no_record(run_copy):
    workdir, args = run_copy
    reports = workdir / "report"
    shutil.rmtree(reports)
    with full_file_system(reports) as filler:  # room for the stage lock, not for the report
        failed = pretrain_cli("run", *args, "--only", "report")
        assert failed.returncode == 1, failed.stdout[-2000:] + failed.stderr[-3000:]
        errors = [line for line in failed.stderr.splitlines() if line.startswith("error:")]
        assert errors == ["error: stage 'report' failed: OSError: [Errno 28] No space left on device"], \
            failed.stderr[-3000:]
        assert "warning: could not record the failure of stage 'report'" in failed.stderr
        assert "failure.json (OSError: [Errno 28] No space left on device)" in failed.stderr
        assert "Traceback" not in failed.stderr
        assert not list(reports.glob("*/.failure.json.tmp-*"))

        filler.unlink()
        rerun = pretrain_cli("run", *args, "--only", "report")
        assert rerun.returncode == 0, rerun.stdout[-2000:] + rerun.stderr[-3000:]
        (manifest,) = reports.glob("*/manifest.json")
        listed = [entry["path"] for entry in json.loads(manifest.read_text())["files"]]
        assert "report.html" in listed and not [p for p in listed if ".tmp-" in p or p.startswith(".")]


def test_a_stage_repaired_with_wandb_offline_is_intact_right_after(run_copy):
    """The dataset stage resumes in its own folder, so the wandb/ folder of the first
    repair's run is still there when the second repair lists its outputs; the engine's
    wandb run for the stage then rewrites wandb/debug.log."""
    workdir, args = run_copy
    repair = (*args, "-o", "tracking.wandb.mode=offline", "--only", "dataset", "--verify")
    (shard,) = workdir.glob("dataset/*/train/shard-00001.arrow")
    original = shard.read_bytes()
    for _ in range(2):
        shard.write_bytes(original[: len(original) // 2])
        result = pretrain_cli("run", *repair)
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        assert "[dataset] removing damaged output" in result.stdout and "[dataset] done" in result.stdout
    stage = shard.parent.parent
    assert sorted((stage / "wandb").glob("offline-run-*")), "wandb offline wrote no run"
    verify = pretrain_cli("verify", str(workdir), "--stage", "dataset")
    assert verify.returncode == 0, verify.stdout
    listed = [entry["path"] for entry in json.loads((stage / "manifest.json").read_text())["files"]]
    assert not [path for path in listed if path.startswith("wandb/")]
    again = pretrain_cli("run", *repair)
    assert again.returncode == 0 and "[dataset] cached" in again.stdout, again.stdout[-3000:]
    assert shard.read_bytes() == original
