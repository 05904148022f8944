"""A real full file system for a test: a small tmpfs mounted on a folder and filled up to
a few free bytes. Mounting needs root with CAP_SYS_ADMIN; elsewhere the test is skipped
with the reason (tests/unit/test_engine_bookkeeping.py covers the same engine code with
/dev/full, which needs nothing)."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

FILLER = ".filler"


@contextlib.contextmanager
def full_file_system(folder: Path, *, size_kib: int = 256, free_bytes: int = 8192) -> Iterator[Path]:
    """Mount a `size_kib` tmpfs on the (empty) `folder` and fill it until `free_bytes`
    are left; yields the filler file (delete it to free the space). Unmounted after."""
    folder.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("a full file system needs a tmpfs mount: root with CAP_SYS_ADMIN")
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_kib}k", "tmpfs", str(folder)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"could not mount a tmpfs ({mounted.stderr.strip()}): needs CAP_SYS_ADMIN")
    try:
        filler = folder / FILLER
        with open(filler, "wb") as f:
            f.write(b"\0" * (size_kib * 1024 - free_bytes))
        yield filler
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)
