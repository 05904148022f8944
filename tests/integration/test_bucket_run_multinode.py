"""An object-store run's tasks and Ray Train workers spread over two Ray nodes that do not
share the run's files (ray.cluster_utils.Cluster on this machine, each node with its own
mirror). The cluster runs in a subprocess, tests/multinode_bucket_run.py, because it
cannot share this test session's Ray instance; the script checks the run and exits
non-zero on any failure, and shuts its cluster down whatever happens."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.ray
def test_a_bucket_run_spreads_its_tasks_and_workers_over_nodes_without_shared_files(tmp_path):
    started = time.time()
    process = subprocess.Popen(
        [sys.executable, str(REPO_ROOT / "tests" / "multinode_bucket_run.py"), str(tmp_path)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)}, cwd=REPO_ROOT)
    try:
        output, _ = process.communicate(timeout=600)
    finally:
        leftovers = psutil.Process(process.pid).children(recursive=True) if process.poll() is None else []
        for child in leftovers:
            child.kill()
        if process.poll() is None:
            process.kill()
            process.wait()
    print(f"multi-node bucket run: {time.time() - started:.1f}s")
    assert process.returncode == 0 and "MULTINODE BUCKET OK" in output, output[-6000:]
