"""Run a script that starts its own Ray cluster (ray.cluster_utils.Cluster), in a
subprocess: a cluster cannot share the test session's Ray instance. The script checks
what it ran, prints a marker line when all is well, and shuts its cluster down."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import psutil

REPO_ROOT = Path(__file__).resolve().parents[2]


def run_cluster_script(script: str, workdir: Path, marker: str, *, timeout: float) -> str:
    """`python tests/support/<script> WORKDIR`; fails the test unless it exits 0 having printed
    `marker`, and returns its output. Whatever it left running (it hung, or died before
    its own cleanup) is ended."""
    started = time.time()
    process = subprocess.Popen(
        [sys.executable, str(Path(__file__).with_name(script)), str(workdir)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)}, cwd=REPO_ROOT)
    try:
        output, _ = process.communicate(timeout=timeout)
    finally:
        leftovers = psutil.Process(process.pid).children(recursive=True) if process.poll() is None else []
        for child in leftovers:
            child.kill()
        if process.poll() is None:
            process.kill()
            process.wait()
    print(f"{script}: {time.time() - started:.1f}s")
    assert process.returncode == 0 and marker in output, output[-6000:]
    return output
