"""One writer per stage directory: a second driver is refused with the holder named (or
waits with --wait-lock and reuses the finished stage); a dead holder's lock is taken over."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from cluster.cli import main
from pipeline.config import load_config
from pipeline.fingerprint import compute_all
from pipeline.planner import plan
from storage.local_store import LocalArtifactStore
from storage.stage_lock import StageLock, peek_holder
from storage.writer_lock import StageLocked
from tests.unit.test_engine import FakeStages, config_file, run  # noqa: F401  (fixture)


def lock_path(config_file: Path, stage: str) -> Path:
    cfg = load_config(config_file)
    return LocalArtifactStore(cfg.resolved_workdir).lock_path(stage, compute_all(cfg)[stage][0])


@pytest.fixture(params=["flock", "file"])
def lock_mode(request, monkeypatch) -> str:
    monkeypatch.setenv("PRETRAIN_LOCK_MODE", request.param)
    return request.param


def test_a_second_driver_is_refused_naming_the_holder(config_file, lock_mode, capsys):
    with StageLock(lock_path(config_file, "ingest"), what="ingest"):
        code = main(["run", str(config_file), "--only", "ingest"])
    err = capsys.readouterr().err
    assert code == 2
    assert f"pid {os.getpid()} on host {socket.gethostname()} since" in err
    assert "--wait-lock" in err
    assert not list(lock_path(config_file, "ingest").parent.glob("*/manifest.json"))


def test_plan_says_who_is_writing_a_stage(config_file, lock_mode):
    with StageLock(lock_path(config_file, "ingest"), what="ingest"):
        reason = {d.stage: d.reason for d in plan(load_config(config_file))}["ingest"]
    assert f"being written now by pid {os.getpid()}" in reason
    assert peek_holder(lock_path(config_file, "ingest")) is None


def test_wait_lock_waits_then_reuses_what_the_holder_finished(config_file, lock_mode):
    holder = StageLock(lock_path(config_file, "ingest"), what="ingest")
    holder.acquire()
    stages, messages = FakeStages(), []
    waiter = threading.Thread(target=lambda: run(config_file, stages, wait_lock=True, echo=messages.append))
    waiter.start()
    time.sleep(1.5)
    assert stages.calls == []  # still waiting for ingest
    assert any("waiting for stage 'ingest'" in m and f"pid {os.getpid()}" in m for m in messages)
    # The holder finishes ingest (a complete stage directory with its manifest) and lets go.
    _finish_stage_as_holder(config_file, "ingest")
    holder.release()
    waiter.join(timeout=30)
    assert not waiter.is_alive()
    assert "ingest" not in stages.calls and stages.calls[0] == "tokenizer"
    assert any("finished by the run we waited for" in m for m in messages)


def _finish_stage_as_holder(config_file: Path, stage: str) -> None:
    from pipeline.runner import _run_stage

    cfg = load_config(config_file)
    fingerprints = compute_all(cfg)
    decision = next(d for d in plan(cfg) if d.stage == stage)
    _run_stage(cfg, LocalArtifactStore(cfg.resolved_workdir), decision, fingerprints,
               FakeStages()(type("Spec", (), {"name": stage})()))


def test_a_lock_left_by_a_dead_process_is_taken_over_with_a_warning(config_file, lock_mode):
    path = lock_path(config_file, "ingest")
    path.parent.mkdir(parents=True, exist_ok=True)
    # A driver that took the lock and was SIGKILLed: its process is gone.
    script = ("import os, sys; from storage.stage_lock import StageLock; "
              "StageLock(sys.argv[1], what='ingest').acquire(); os.kill(os.getpid(), 9)")
    subprocess.run([sys.executable, "-c", script, str(path)], cwd=Path(__file__).parents[2])
    messages = []
    with StageLock(path, what="stage 'ingest'", echo=messages.append):
        pass
    assert any(m.startswith("warning: stage 'ingest': taking over") for m in messages), messages


def test_a_live_holder_on_another_host_is_respected_until_its_heartbeat_stops(tmp_path, monkeypatch):
    monkeypatch.setenv("PRETRAIN_LOCK_MODE", "file")
    path = tmp_path / ".fp.lock"
    path.write_text(json.dumps({"host": "node-7", "pid": 123, "since": time.time()}))
    with pytest.raises(StageLocked, match="pid 123 on host node-7"):
        StageLock(path, what="x").acquire()
    old = time.time() - 3600
    os.utime(path, (old, old))  # no heartbeat for an hour: that driver is gone
    messages = []
    with StageLock(path, what="x", echo=messages.append):
        assert json.loads(path.read_text())["pid"] == os.getpid()
    assert any("stale lock" in m for m in messages) and not path.exists()


def test_a_clean_release_leaves_no_warning_for_the_next_holder(tmp_path, lock_mode):
    messages = []
    for _ in range(2):
        with StageLock(tmp_path / ".fp.lock", what="x", echo=messages.append):
            pass
    assert messages == []
