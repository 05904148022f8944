"""The console of a tiny run through the real CLI (the session's finished_run, no run of
its own): at least 90% of its lines are the pipeline's own, and nothing follows the
run's closing lines. Before pipeline/worker_console.py, 36 of 73 lines came from Ray,
DeepSpeed or torch ("(RayTrainWorker pid=...) Reporting training result ...")."""

from __future__ import annotations

import re

import pytest

from pipeline.graph import STAGE_NAMES

pytestmark = pytest.mark.ray

# What pipeline/runner.py, pipeline/ray_session.py and pipeline/cli.py print, and the
# workers' lines pipeline/worker_console.py lets through ([<stage>] and [training]).
OUR_LINE = re.compile(r"^\[(?:%s|training)\] " % "|".join(STAGE_NAMES))
OUR_STARTS = ("started local Ray", "connecting to Ray", "connected to Ray", "RAY_ADDRESS is set",
              "done: ", "outputs:", "  ", "try it: ", "error: ", "warning: ", "hint: ", "interrupted: ")

# Ray's log format ("2026-11-29 06:31:26,145\tINFO worker.py:2029 -- ...") and its prefix
# of worker lines ("(RayTrainWorker pid=5078) ..."); pipeline.worker_console's prefix.
RAY_OUTPUT = re.compile(r"^\d{4}-\d\d-\d\d [\d:,]+\s+[A-Z]+ \S+\.py:\d+ -- |\(\w+ pid=\d+(?:, ip=\S+)?\)")
WORKER_RELAY = re.compile(r"^\[\w+ pid \d+\]")


def is_ours(line: str) -> bool:
    return bool(OUR_LINE.match(line)) or line.startswith(OUR_STARTS)


def test_the_console_is_the_pipelines_own_lines(finished_run):
    _, _, result = finished_run
    lines = [line for line in (result.stdout + result.stderr).splitlines() if line.strip()]
    others = [line for line in lines if not is_ours(line)]
    assert len(lines) - len(others) >= 0.9 * len(lines), "\n".join(["not ours:", *others])
    assert not any("repeated" in line and "across cluster" in line for line in lines)
    # rank 0's progress, as whole lines
    assert any(re.match(r"\[pretrain\] step \d+/\d+ \(\d+%\)  loss \d", line) for line in lines), lines


def test_nothing_prints_after_the_runs_last_line(finished_run):
    _, _, result = finished_run
    stdout = result.stdout.splitlines()
    closing = stdout[next(i for i, line in enumerate(stdout) if line.startswith("done: `pretrain status")):]
    assert all(line.startswith(("done: ", "outputs:", "  ", "try it: ")) for line in closing), closing
    assert closing[-1].startswith("try it: pretrain generate")
    # stderr comes apart from stdout here, so its order is unknown: it must hold no Ray or
    # worker output at all (late worker lines, Ray's shutdown), which could follow the end.
    ray_lines = [line for line in result.stderr.splitlines()
                 if RAY_OUTPUT.search(line) or WORKER_RELAY.match(line)]
    assert ray_lines == [], result.stderr
