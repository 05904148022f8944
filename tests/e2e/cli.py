"""Run the real `pretrain` CLI in a subprocess, attached to the test session's Ray."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def cli_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def cli_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "cluster.cli", *args]


def pretrain_cli(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(cli_command(*args), cwd=REPO_ROOT, env=cli_env(),
                          capture_output=True, text=True, timeout=timeout)


def start_cli(*args: str, log: Path) -> subprocess.Popen:
    handle = open(log, "w")
    return subprocess.Popen(cli_command(*args), cwd=REPO_ROOT, env=cli_env(),
                            stdout=handle, stderr=subprocess.STDOUT)
