"""Task functions that fail the way a worker dies, for tests of stages.ray_tasks. They live
in an importable module (Ray pickles task functions by reference; a test module is not
importable in a worker)."""

from __future__ import annotations

import os
import signal
from pathlib import Path


def killed_worker(attempts_dir: str) -> None:
    """Record this attempt, then die as the kernel's OOM killer would end the process (SIGKILL)."""
    Path(attempts_dir, f"attempt-{os.getpid()}").touch()
    os.kill(os.getpid(), signal.SIGKILL)


def square(number: int) -> int:
    return number * number
