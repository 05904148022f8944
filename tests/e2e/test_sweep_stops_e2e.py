"""A sweep that is stopped, or whose points or shared stages fail, through the real CLI on
the session Ray, with the gpt-tiny config stopped after ingest (--only), since what is
tested here is the driver and its `pretrain run` children, not the stages.

Stopped: the points read their corpus from a server whose files never finish
downloading (tests/support/stalled_http.py), so the signal always lands while a stage runs.
- SIGTERM (a scheduler) and SIGINT (Ctrl-C sent to the driver alone) stop the running
  children, as Ctrl-C stops a `pretrain run` (each exits 143 and says so in its log, its
  stage lock released), and the driver exits 143 or 130 with a message;
- SIGKILL of the driver alone: its children see it gone and stop themselves.
Failed: a point whose corpus file is missing fails at run time (validation passes: the
file is only read by the stage): the sweep still runs the other point and exits 1 naming
the failed one; a shared stage that fails stops the sweep before any point runs.
(tests/e2e/test_sweep_e2e.py kills and resumes a sweep that pretrains.)
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from pipeline.fingerprint import compute_all
from storage.artifact_store import open_store
from sweep.expand import expand_sweep
from tests.e2e.cli import REPO_ROOT, cli_command, cli_env, pretrain_cli
from tests.e2e.conftest import CONFIG
from tests.support.process_tree import kill_process_group
from tests.support.stalled_http import stalled_http_server

pytestmark = [pytest.mark.e2e, pytest.mark.ray]
BOOK = "corpus/gutenberg/11-0.txt"  # 150 kB: the smallest of the gpt-tiny books


def sweep_overrides(root: Path, ray_address: str, *overrides: str) -> list[str]:
    return [f"workdir={root}", f"ray.address={ray_address}", *overrides]


def as_args(overrides: list[str], *flags: str) -> list[str]:
    return [CONFIG, *[arg for o in overrides for arg in ("-o", o)], "--only", "ingest", *flags]


def start_sweep(args: list[str], log: Path) -> subprocess.Popen:
    with open(log, "w") as handle:  # the child keeps its own copy of the descriptor
        return subprocess.Popen(cli_command("sweep", *args), cwd=REPO_ROOT, env=cli_env(), stdout=handle,
                                stderr=subprocess.STDOUT, start_new_session=True)


def wait_for(log: Path, driver: subprocess.Popen, done, timeout: float = 300) -> str:
    deadline = time.time() + timeout
    while time.time() < deadline:
        text = log.read_text()
        if done(text):
            return text
        assert driver.poll() is None, f"the sweep ended (exit {driver.returncode}) too early:\n{text[-3000:]}"
        time.sleep(0.2)
    raise AssertionError(f"waited {timeout:.0f} s in vain:\n{log.read_text()[-3000:]}")


def point_processes(driver: subprocess.Popen) -> list[psutil.Process]:
    """The driver's `pretrain run` children (its points, or the shared stages' run)."""
    children = psutil.Process(driver.pid).children()
    return [p for p in children if p.cmdline()[1:4] == ["-m", "pipeline.cli", "run"]]


def end_all(driver: subprocess.Popen, children: list[psutil.Process]) -> None:
    """Whatever a failed test left running: the driver's group, and its children (each
    leads its own group)."""
    kill_process_group(driver)
    for child in children:
        try:
            child.kill()
        except psutil.NoSuchProcess:
            pass


def states(root: Path) -> dict[str, tuple[str, int | None]]:
    return {p["name"]: (p["state"], p.get("exit_code"))
            for p in json.loads((root / "sweep.json").read_text())["points"]}


def assert_ingest_unlocked(root: Path, overrides: list[str]) -> None:
    store = open_store(root / "store", root / "store")
    for point in expand_sweep(CONFIG, overrides).points:
        fingerprint = compute_all(point.config, save_cache=False)["ingest"][0]
        assert store.lock_holder("ingest", fingerprint) is None, point.name


@pytest.mark.parametrize("signum, exit_code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_to_the_driver_stops_the_running_points_and_exits_with_a_message(
        ray_address, tmp_path, signum, exit_code):
    root = tmp_path / "sweep"
    with stalled_http_server() as url:
        overrides = sweep_overrides(root, ray_address,
                                    f"ingest.sources=[[{{path: '{url}/a.txt'}}],[{{path: '{url}/b.txt'}}]]")
        driver = start_sweep(as_args(overrides, "--max-concurrent", "2"), tmp_path / "sweep.log")
        children = []
        try:
            wait_for(tmp_path / "sweep.log", driver, lambda text: text.count("] [ingest] running") == 2)
            children = point_processes(driver)
            assert len(children) == 2
            driver.send_signal(signum)
            assert driver.wait(timeout=120) == exit_code, (tmp_path / "sweep.log").read_text()[-3000:]
            _, alive = psutil.wait_procs(children, timeout=60)
            assert not alive, [p.cmdline() for p in alive]
        finally:
            end_all(driver, children)
        output = (tmp_path / "sweep.log").read_text()
        assert f"interrupted ({signal.Signals(signum).name}): the running points were stopped" in output, output
        # Each child stopped as `pretrain run` does on Ctrl-C or SIGTERM (the driver sends SIGTERM).
        assert set(states(root).values()) == {("interrupted", 143)}, states(root)
        for name in states(root):
            assert "interrupted: finished stages and committed checkpoints are kept" in (
                root / name / "sweep.log").read_text()
        assert_ingest_unlocked(root, overrides)


def test_sigint_while_a_shared_stage_runs_stops_it_and_no_point_starts(ray_address, tmp_path):
    root = tmp_path / "sweep"
    with stalled_http_server() as url:
        overrides = sweep_overrides(root, ray_address, f"ingest.sources=[{{path: '{url}/a.txt'}}]",
                                    "tokenizer.vocab_size=[512,1024]")
        driver = start_sweep(as_args(overrides, "--only", "tokenizer"), tmp_path / "sweep.log")
        children = []
        try:
            wait_for(tmp_path / "sweep.log", driver, lambda text: "[shared] [ingest] running" in text)
            children = point_processes(driver)
            driver.send_signal(signal.SIGINT)
            assert driver.wait(timeout=120) == 130
            _, alive = psutil.wait_procs(children, timeout=60)
            assert children and not alive
        finally:
            end_all(driver, children)
        assert "interrupted (SIGINT)" in (tmp_path / "sweep.log").read_text()
        assert "interrupted: finished stages" in (root / "shared-stages.log").read_text()
        assert {state for state, _ in states(root).values()} == {"pending"}
        assert_ingest_unlocked(root, overrides)


def test_the_points_of_a_sigkilled_driver_stop_themselves(ray_address, tmp_path):
    root = tmp_path / "sweep"
    with stalled_http_server() as url:
        overrides = sweep_overrides(root, ray_address,
                                    f"ingest.sources=[[{{path: '{url}/a.txt'}}],[{{path: '{url}/b.txt'}}]]")
        driver = start_sweep(as_args(overrides, "--max-concurrent", "2"), tmp_path / "sweep.log")
        children = []
        try:
            wait_for(tmp_path / "sweep.log", driver, lambda text: text.count("] [ingest] running") == 2)
            children = point_processes(driver)
            driver.kill()  # the driver alone, as the OOM killer would: nothing of it runs
            driver.wait(timeout=60)
            _, alive = psutil.wait_procs(children, timeout=60)
            assert len(children) == 2 and not alive, [p.cmdline() for p in alive]
        finally:
            end_all(driver, children)
        assert_ingest_unlocked(root, overrides)


def test_a_point_that_fails_fails_the_sweep_which_names_it(ray_address, tmp_path):
    root = tmp_path / "sweep"
    overrides = sweep_overrides(root, ray_address,
                                f"ingest.sources=[[{{path: {BOOK}}}],[{{path: corpus/gone.txt}}]]")
    result = pretrain_cli("sweep", *as_args(overrides, "--max-concurrent", "2"))
    assert result.returncode == 1, result.stdout[-3000:] + result.stderr[-3000:]
    good, bad = [p.name for p in expand_sweep(CONFIG, overrides).points]
    assert bad == "sources-path-corpus-gone.txt"
    assert f"error: 1 point(s) failed: {bad} " in result.stdout, result.stdout
    assert states(root) == {good: ("done", 0), bad: ("failed", 1)}  # the other point still ran
    assert "matched no files" in (root / bad / "sweep.log").read_text()


def test_a_shared_stage_that_fails_fails_the_sweep_before_any_point_runs(ray_address, tmp_path):
    root = tmp_path / "sweep"
    overrides = sweep_overrides(root, ray_address, "ingest.sources=[{path: corpus/gone.txt}]",
                                "tokenizer.vocab_size=[512,1024]")
    result = pretrain_cli("sweep", *as_args(overrides, "--only", "tokenizer"))
    assert result.returncode == 1, result.stdout[-3000:] + result.stderr[-3000:]
    assert "error: a shared stage failed, so no point can run" in result.stdout, result.stdout
    assert "[shared] ingest failed (exit 1)" in result.stdout, result.stdout
    assert {state for state, _ in states(root).values()} == {"pending"}
    assert not (root / "store" / "tokenizer").exists()
