"""`pretrain submit` against a real Ray head started with `ray start --head` on 127.0.0.1:
the tiny pipeline succeeds as a Ray Job and writes its manifests; a broken config ends
FAILED with the stage's error in the job logs; a passed secret is never shown; a config
needing more CPUs than the (fixed-size) head has is refused before submitting.

The head is a separate Ray instance on its own free ports (the rest of the suite shares
the `ray_session` one). It runs with `--block` so that its process owns everything it
starts; teardown ends that process tree by PID (never `ray stop`, which would stop every
Ray on the machine). About 80 s alone, most of it the pipeline's job (every stage, tiny).
"""

from __future__ import annotations

import json
import re
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest

from tests.support.process_tree import end_process_tree

REPO_ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent
SECRET = "wandb-secret-value-1f2e3d"
# Every stage runs, as small as it goes: what this proves is the job, not the training
# (the whole pipeline at its configured size is tests/e2e's).
STEPS = 4
SMALL = tuple(arg for override in (
    "evaluate.tasks=[]", "evaluate.shots=0", f"pretrain.max_steps={STEPS}", "pretrain.warmup_steps=1",
    f"pretrain.eval_every={STEPS}", f"pretrain.checkpoint_every={STEPS}", "pretrain.num_workers=1",
    "finetune.num_workers=1", "finetune.max_train_examples=32", "finetune.max_eval_examples=32",
    "finetune.max_test_examples=8") for arg in ("-o", override))

pytestmark = [pytest.mark.ray, pytest.mark.timeout(600)]


def free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def head_env() -> dict[str, str]:
    """Server and clients agree on auth (DESIGN.md): token auth off for both. The venv's
    bin comes first on PATH so that the job's `python` is this project's interpreter."""
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "WANDB_API_KEY")}
    env.update(RAY_AUTH_MODE="disabled", PATH=f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}",
               PYTHONUNBUFFERED="1")
    return env


@pytest.fixture(scope="module")
def head_address():
    gcs, dashboard, client, agent = free_ports(4)
    # A short temp dir: Ray's unix socket paths must stay under ~107 characters.
    temp_dir = tempfile.mkdtemp(prefix="rayhead-", dir="/tmp")
    log = open(Path(temp_dir) / "ray-start.log", "w")
    head = subprocess.Popen(
        [str(VENV_BIN / "ray"), "start", "--head", "--block", "--node-ip-address=127.0.0.1",
         "--dashboard-host=127.0.0.1", f"--port={gcs}", f"--dashboard-port={dashboard}",
         f"--ray-client-server-port={client}", f"--dashboard-agent-listen-port={agent}",
         "--num-cpus=2", "--num-gpus=0", f"--temp-dir={temp_dir}"],
        env=head_env(), stdout=log, stderr=subprocess.STDOUT, cwd=temp_dir)
    address = f"http://127.0.0.1:{dashboard}"
    try:
        _wait_for_jobs_api(address, head, Path(temp_dir) / "ray-start.log")
        yield address
    finally:
        end_process_tree(head)
        log.close()
        shutil.rmtree(temp_dir, ignore_errors=True)


def _wait_for_jobs_api(address: str, head: subprocess.Popen, log: Path, timeout_s: float = 90) -> None:
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if head.poll() is not None:
            pytest.fail(f"ray start exited with {head.returncode}:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(f"{address}/api/version", timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(1)
    pytest.fail(f"the Ray head's dashboard did not answer at {address} in {timeout_s}s")


def pretrain(*args: str, env_extra: dict | None = None, timeout: float = 420) -> subprocess.CompletedProcess:
    env = {**head_env(), "PYTHONPATH": str(REPO_ROOT), **(env_extra or {})}
    return subprocess.run([sys.executable, "-m", "cluster.cli", *args], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


def test_tiny_pipeline_succeeds_as_a_ray_job(head_address, tmp_path):
    workdir = tmp_path / "gpt-tiny"
    result = pretrain("submit", "configs/gpt-tiny.yaml", "--address", head_address,
                      "-o", f"workdir={workdir}", *SMALL, "--follow",
                      env_extra={"WANDB_API_KEY": SECRET})
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    assert "SUCCEEDED" in result.stdout
    # Other forwarded variables (DATA_DIR, which the Makefile exports) may be listed too.
    passed = re.search(r"passing environment variables: (.*) \(values not shown\)", result.stdout)
    assert passed and "WANDB_API_KEY" in passed.group(1).split(", "), result.stdout
    for stage in ("ingest", "tokenizer", "dataset", "pretrain", "finetune", "report"):
        (manifest_path,) = workdir.glob(f"{stage}/*/manifest.json")
        assert json.loads(manifest_path.read_text())["stage"] == stage
    pretrain_manifest = json.loads(next(workdir.glob("pretrain/*/manifest.json")).read_text())
    assert pretrain_manifest["metrics"]["steps"] == STEPS
    assert (next(workdir.glob("report/*/")) / "report.html").is_file()

    # The key reached the job (it is in the runtime_env) but no output or file shows it.
    assert SECRET not in output
    job_id = next(line for line in result.stdout.splitlines() if line.startswith("pretrain-gpt-tiny-"))
    logs = pretrain("logs", job_id, "--address", head_address)
    assert logs.returncode == 0 and "[report] done" in logs.stdout and SECRET not in logs.stdout
    for path in workdir.rglob("*"):
        if path.is_file() and path.stat().st_size < 5_000_000:
            assert SECRET.encode() not in path.read_bytes(), f"{path} holds the secret"


def test_a_failing_stage_fails_the_job_with_its_error_in_the_logs(head_address, tmp_path):
    workdir = tmp_path / "broken"
    result = pretrain("submit", "configs/gpt-tiny.yaml", "--address", head_address,
                      "-o", f"workdir={workdir}", "-o", "ingest.sources=[{path: corpus/no-such-book.txt}]")
    assert result.returncode == 0, result.stderr
    job_id = next(line for line in result.stdout.splitlines() if line.startswith("pretrain-gpt-tiny-"))

    followed = pretrain("logs", job_id, "--address", head_address, "--follow", timeout=240)
    assert followed.returncode == 1 and f"job {job_id}: FAILED" in followed.stderr, followed.stderr
    logs = pretrain("logs", job_id, "--address", head_address)
    assert "stage 'ingest' failed: FileNotFoundError" in logs.stdout
    assert "no-such-book.txt" in logs.stdout
    listing = pretrain("jobs", "--address", head_address)
    assert job_id in listing.stdout and "FAILED" in listing.stdout
    assert (workdir / "ingest").is_dir() and not list(workdir.glob("ingest/*/manifest.json"))


def test_a_config_the_cluster_cannot_hold_is_refused_before_submitting(head_address, tmp_path):
    workdir = tmp_path / "too-big"
    result = pretrain("submit", "configs/gpt-tiny.yaml", "--address", head_address,
                      "-o", f"workdir={workdir}", "-o", "pretrain.num_workers=4")
    assert result.returncode == 1
    assert "4 CPU needed, 2 present" in result.stderr and not workdir.exists()
    assert "pretrain-gpt-tiny-" not in result.stdout  # no job id: nothing was submitted


def test_a_config_asking_for_gpus_the_cluster_lacks_is_refused_before_submitting(head_address, tmp_path):
    # The head is started with --num-gpus=0, so this holds on GPU machines too.
    workdir = tmp_path / "gpus"
    result = pretrain("submit", "configs/gpt-tiny.yaml", "--address", head_address,
                      "-o", f"workdir={workdir}", "-o", "pretrain.gpus_per_worker=1")
    assert result.returncode == 1
    assert "GPU needed, 0 present" in result.stderr and "pretrain.gpus_per_worker" in result.stderr
    assert not workdir.exists() and "pretrain-gpt-tiny-" not in result.stdout
