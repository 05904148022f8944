"""With `ray.address` unset, `pretrain run` starts its own embedded Ray, whatever cluster
`ray start --head` left on this machine: a live head does not get the run, and a dead
head's leftover address file does not make it wait. Joining is asked for with 'auto',
which then fails fast and clearly when that head is gone.

Ray finds "the cluster started on this machine" through <temp dir>/ray/ray_current_cluster,
the temp dir being $RAY_TMPDIR (default /tmp). Each test points RAY_TMPDIR of the head and
of the CLI at a fresh folder, so the suite's shared Ray and other heads never see them. The
head runs with `--block` and is ended by PID (never `ray stop`, which stops every Ray on
the machine); server and clients agree on RAY_AUTH_MODE (DESIGN.md).
"""

from __future__ import annotations

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
PARAGRAPHS = [f"Paragraph {i} tells of the {i}th lighthouse keeper, who counted {i * 7} ships "
              f"and wrote each name in a ledger kept dry under the stairs." for i in range(60)]

pytestmark = [pytest.mark.ray, pytest.mark.timeout(600)]


def free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


@pytest.fixture
def ray_tmpdir():
    # Short: Ray's unix socket paths under it must stay under ~107 characters.
    path = Path(tempfile.mkdtemp(prefix="rt-", dir="/tmp"))
    (path / "ray").mkdir()
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def tiny_run(tmp_path) -> tuple[str, ...]:
    """`pretrain run` arguments for the ingest stage alone on a small corpus."""
    (tmp_path / "corpus.txt").write_text("\n\n".join(PARAGRAPHS) + "\n")
    return ("run", "configs/gpt-tiny.yaml", "--only", "ingest", "-o", f"workdir={tmp_path / 'run'}",
            "-o", f"data_dir={tmp_path}", "-o", "ingest.sources=[{path: corpus.txt}]")


def env_for(ray_tmpdir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env.update(RAY_TMPDIR=str(ray_tmpdir), RAY_AUTH_MODE="disabled", PYTHONUNBUFFERED="1",
               PYTHONPATH=str(REPO_ROOT), PATH=f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}")
    return env


def pretrain(args: tuple[str, ...], ray_tmpdir: Path, timeout: float = 240,
             **extra_env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cluster.cli", *args], cwd=REPO_ROOT,
                          env={**env_for(ray_tmpdir), **extra_env}, capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture
def live_head(ray_tmpdir):
    """A one-CPU `ray start --head` recorded in ray_tmpdir; yields its dashboard URL."""
    gcs, dashboard, client, agent = free_ports(4)
    log_path = ray_tmpdir / "ray-start.log"
    with open(log_path, "w") as log:
        head = subprocess.Popen(
            [str(VENV_BIN / "ray"), "start", "--head", "--block", "--node-ip-address=127.0.0.1",
             "--dashboard-host=127.0.0.1", f"--port={gcs}", f"--dashboard-port={dashboard}",
             f"--ray-client-server-port={client}", f"--dashboard-agent-listen-port={agent}",
             "--num-cpus=1", "--num-gpus=0", f"--temp-dir={ray_tmpdir / 'ray'}"],
            env=env_for(ray_tmpdir), stdout=log, stderr=subprocess.STDOUT, cwd=ray_tmpdir)
    url = f"http://127.0.0.1:{dashboard}"
    try:
        _wait_until_up(url, head, ray_tmpdir / "ray" / "ray_current_cluster", log_path)
        yield url
    finally:
        end_process_tree(head)


def _wait_until_up(url: str, head: subprocess.Popen, address_file: Path, log: Path,
                   timeout_s: float = 90) -> None:
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if head.poll() is not None:
            pytest.fail(f"ray start exited with {head.returncode}:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(f"{url}/api/version", timeout=2) as response:
                if response.status == 200 and address_file.is_file():
                    return
        except OSError:
            pass
        time.sleep(1)
    pytest.fail(f"the Ray head did not come up in {timeout_s}s:\n{log.read_text()[-3000:]}")


def test_unset_address_does_not_join_a_live_head_on_this_machine(live_head, ray_tmpdir, tiny_run):
    from ray.util.state import list_jobs

    result = pretrain(tiny_run, ray_tmpdir)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "started local Ray" in result.stdout and "connecting" not in result.stdout
    assert "[ingest] done" in result.stdout
    # A bare ray.init() would have joined the head: its job table would list our driver.
    assert list_jobs(address=live_head) == []


def test_a_dead_heads_address_file_neither_hangs_an_unset_address_nor_fools_auto(ray_tmpdir, tiny_run):
    (dead_port,) = free_ports(1)
    (ray_tmpdir / "ray" / "ray_current_cluster").write_text(f"127.0.0.1:{dead_port}")

    # Joining the dead head waited 13 min before it failed; this run needs ~25 s.
    result = pretrain(tiny_run, ray_tmpdir, timeout=150)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "started local Ray" in result.stdout and "[ingest] done" in result.stdout

    # A fresh workdir: ingest must run again, so Ray is needed. Inside the suite `auto`
    # finds the suite's own Ray (below), and ray.init asks that GCS for its cluster id
    # once a second, 20 times, per start attempt (~45 s in all): Ray's
    # RAY_gcs_server_port_wait_time_s makes that 2 tries.
    joined = pretrain((*tiny_run, "-o", "ray.address=auto", "-o", f"workdir={ray_tmpdir / 'auto'}"),
                      ray_tmpdir, timeout=60, RAY_gcs_server_port_wait_time_s="2")
    assert joined.returncode == 1, joined.stdout[-3000:] + joined.stderr[-3000:]
    error, hint = joined.stderr.strip().splitlines()[-2:]
    # Which address `auto` resolves to depends on what else runs here (inside the test
    # suite, Ray also finds the suite's own instance, which refuses this unauthenticated
    # client); either way the run ends at once with one error line and a hint.
    assert error.startswith("error: could not start Ray (ConnectionError: ")
    assert "ray start --head" in hint
    assert "Traceback" not in joined.stderr
