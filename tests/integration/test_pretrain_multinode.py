"""The pretrain stage trains across two Ray nodes (ray.cluster_utils.Cluster on this
machine, one worker per node). The cluster runs in a subprocess, tests/multinode_pretrain.py,
because it cannot share this test session's Ray instance; the script checks the run and
exits non-zero on any failure, and shuts its cluster down whatever happens."""

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
def test_pretrain_trains_across_two_nodes(tmp_path):
    started = time.time()
    process = subprocess.Popen(
        [sys.executable, str(REPO_ROOT / "tests" / "multinode_pretrain.py"), str(tmp_path)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)}, cwd=REPO_ROOT)
    try:
        output, _ = process.communicate(timeout=300)
    finally:
        # If the script hung or died before its own cleanup, end what it started.
        leftovers = psutil.Process(process.pid).children(recursive=True) if process.poll() is None else []
        for child in leftovers:
            child.kill()
        if process.poll() is None:
            process.kill()
            process.wait()
    print(f"multi-node run: {time.time() - started:.1f}s")
    assert process.returncode == 0 and "MULTINODE OK" in output, output[-5000:]
