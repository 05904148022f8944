"""Starting Ray: one retry after a failed start, then a one-line cause and what to try;
an address where nothing listens fails at once instead of hanging in Ray's connect.

`ray.init` is replaced here only to make a start fail on demand (and `ray.shutdown`, so
that the clean-up after a failed start never touches a Ray the test session may hold);
tests/integration/test_ray_embedded.py starts real instances through the CLI."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest
import ray

from pipeline.config import RayConfig
from pipeline.ray_session import RaySession, RayStartError

RAYLET_TIMEOUT = Exception("The current node timed out during startup. This could happen "
                           "because some of the raylet failed to startup or the GCS has "
                           "become overloaded.\n  (more lines of detail)")


@pytest.fixture
def fake_ray(monkeypatch):
    """ray.init fails with the errors queued in `failures`, then succeeds."""
    calls, failures = [], []

    def init(**kwargs):
        calls.append(kwargs)
        if failures:
            raise failures.pop(0)

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", init)
    monkeypatch.setattr(ray, "shutdown", lambda **_: None)
    monkeypatch.setattr(ray, "cluster_resources", lambda: {"CPU": 3.0})
    return calls, failures


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_unset_address_starts_a_new_local_instance_whatever_runs_here(fake_ray):
    calls, _ = fake_ray
    messages = []
    session = RaySession(RayConfig(num_cpus=3))
    session.ensure_started(messages.append)
    assert session.started and calls[0]["address"] == "local" and calls[0]["num_cpus"] == 3
    assert len(messages) == 1 and messages[0].startswith("started local Ray (3 CPUs)")


def test_a_failed_start_is_retried_once(fake_ray):
    calls, failures = fake_ray
    failures.append(RAYLET_TIMEOUT)
    messages = []
    session = RaySession(RayConfig(), retry_delay_s=0)
    session.ensure_started(messages.append)
    assert len(calls) == 2 and session.started
    assert messages[0].startswith("could not start Ray (Exception: The current node timed out")
    assert "trying once more" in messages[0] and messages[1].startswith("started local Ray (3 CPUs)")


def test_two_failed_starts_raise_one_line_and_a_hint(fake_ray):
    calls, failures = fake_ray
    failures.extend([RAYLET_TIMEOUT, RAYLET_TIMEOUT])
    session = RaySession(RayConfig(), retry_delay_s=0)
    with pytest.raises(RayStartError) as raised:
        session.ensure_started(lambda message: None)
    assert len(calls) == 2 and not session.started
    assert str(raised.value) == (
        "could not start Ray (Exception: The current node timed out during startup. This could "
        "happen because some of the raylet failed to startup or the GCS has become overloaded.)")
    assert "ray.num_cpus" in raised.value.hint and "ray stop" in raised.value.hint


def test_an_address_where_nothing_listens_fails_fast_naming_it(fake_ray):
    calls, _ = fake_ray
    port = closed_port()
    session = RaySession(RayConfig(address=f"127.0.0.1:{port}"), retry_delay_s=0)
    with pytest.raises(RayStartError) as raised:
        session.ensure_started(lambda message: None)
    assert calls == []  # Ray's own connect would have retried for many minutes
    assert f"nothing answers at" in str(raised.value) and f":{port}" in str(raised.value)
    assert f"ray.address=127.0.0.1:{port} up" in raised.value.hint


def test_the_cli_prints_error_and_hint_and_exits_1(tmp_path):
    """The real CLI, with a `ray.address` where nothing listens: no traceback."""
    config = tmp_path / "tiny.yaml"
    (tmp_path / "corpus.txt").write_text("A line of text long enough to be kept.\n")
    config.write_text(f"name: tiny\nworkdir: {tmp_path / 'run'}\ndata_dir: {tmp_path}\n"
                      "ingest: {sources: [{path: corpus.txt}]}\n")
    result = subprocess.run(
        [sys.executable, "-m", "pipeline.cli", "run", str(config), "--only", "ingest",
         "-o", f"ray.address=127.0.0.1:{closed_port()}"],
        capture_output=True, text=True, timeout=120)
    assert result.returncode == 1, result.stderr
    lines = result.stderr.strip().splitlines()
    assert lines[-2].startswith("error: could not start Ray (ConnectionError: nothing answers at "), lines
    assert "is the Ray head at ray.address=" in lines[-1] and "Traceback" not in result.stderr
