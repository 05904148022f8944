"""The suite runner itself (tests/parallel_suite.py), on real child processes: a pytest
part killed by a signal, failing, finding no tests or dying before its summary decides
the exit status as it should, and the last line adds up both parts' counts. The stand-in
"pytest" is a few lines of Python that act as told per part; the last test runs real
pytest sessions on a small test file."""

from __future__ import annotations

import sys
import textwrap

import pytest

from tests.parallel_suite import main

# Acts for the part it was started for (the unit part's arguments hold "not ray"):
# pass / fail / empty (pytest's "no tests collected") with counts written as the
# tests.suite_counts plugin writes them, silent (exit 0, no counts), or a signal's name
# to kill itself with.
STAND_IN = """
import json, os, resource, signal, sys
ray_action, unit_action = sys.argv[1:3]
action = unit_action if "not ray" in sys.argv else ray_action
path = next((a.split("=", 1)[1] for a in sys.argv if a.startswith("--suite-counts=")), None)
def finish(status, **counts):
    if path:
        with open(path, "w") as f:
            json.dump({"passed": 0, "failed": 0, "skipped": 0, "error": 0, **counts}, f)
    sys.exit(status)
if action == "pass":
    finish(0, passed=3, skipped=1)
if action == "fail":
    finish(1, passed=2, failed=1)
if action == "empty":
    finish(5)
if action == "silent":
    sys.exit(0)
resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # a SIGSEGV leaves no core file behind
os.kill(os.getpid(), getattr(signal, action))
"""


def stand_in(ray_action: str, unit_action: str) -> list[str]:
    return [sys.executable, "-c", STAND_IN, ray_action, unit_action]


@pytest.mark.parametrize("ray_action, unit_action, status, said, last", [
    ("pass", "pass", 0, None, "6 passed, 0 failed, 2 skipped"),
    ("pass", "fail", 1, None, "5 passed, 1 failed, 1 skipped"),
    ("empty", "pass", 0, None, "3 passed, 0 failed, 1 skipped"),
    ("SIGKILL", "pass", 137, "the Ray tests' pytest was killed by SIGKILL (signal 9)", "counts unknown"),
    ("SIGSEGV", "pass", 139, "the Ray tests' pytest was killed by SIGSEGV (signal 11)", "counts unknown"),
    ("pass", "SIGKILL", 137, "the unit tests' pytest was killed by SIGKILL (signal 9)", "counts unknown"),
    ("fail", "SIGSEGV", 139, "the unit tests' pytest was killed by SIGSEGV (signal 11)", "counts unknown"),
    ("pass", "silent", 1, "the unit tests' pytest wrote no counts", "counts unknown"),
])
def test_the_exit_status_and_last_line(capfd, ray_action, unit_action, status, said, last):
    assert main([], pytest=stand_in(ray_action, unit_action)) == status
    out = capfd.readouterr().out
    if said:
        assert said in out
    last_line = out.strip().splitlines()[-1]
    assert last_line.startswith("suite: Ray tests exit ")
    assert last in last_line and (last_line.endswith(last) or last == "counts unknown")


def test_one_plain_pytest_killed_by_a_signal_fails_too(capfd):
    # With arguments there is one pytest, which acts as the stand-in's "Ray" part.
    assert main(["tests/unit"], pytest=stand_in("SIGKILL", "pass")) == 137
    assert "pytest was killed by SIGKILL (signal 9); exit status 137" in capfd.readouterr().out
    assert main(["tests/unit"], pytest=stand_in("fail", "pass")) == 1
    assert main(["tests/unit"], pytest=stand_in("empty", "pass")) == 0  # nothing selected


SAMPLE_TESTS = """
import pytest

@pytest.mark.ray
def test_ray_one():
    pass

@pytest.mark.ray
@pytest.mark.skip(reason="sample")
def test_ray_skipped():
    pass

def test_unit_one():
    pass

def test_unit_two():
    pass

def test_unit_fails():
    assert False
"""


def test_real_pytest_parts_are_counted_by_the_plugin(tmp_path, capfd):
    (tmp_path / "test_sample.py").write_text(textwrap.dedent(SAMPLE_TESTS))
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    ray: sample\n")
    real = [sys.executable, "-m", "pytest", "-q", "-c", str(tmp_path / "pytest.ini"),
            "--rootdir", str(tmp_path), str(tmp_path)]
    assert main([], pytest=real) == 1
    last_line = capfd.readouterr().out.strip().splitlines()[-1]
    assert last_line.startswith("suite: Ray tests exit 0, unit tests exit 1;")
    assert last_line.endswith("3 passed, 1 failed, 1 skipped")
