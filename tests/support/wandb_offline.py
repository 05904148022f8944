"""Read what an offline wandb run wrote, for tests that check what reached wandb.

wandb's core process keeps writing the run's `.wandb` log for a moment after
`run.finish()` returns, so a test that reads it at once sees a truncated file now and
then. `offline_log` waits (up to `timeout` seconds) until every expected name is there.
"""

from __future__ import annotations

import time
from pathlib import Path


def offline_log(run_parent: Path, expected: list[bytes], timeout: float = 30.0,
                which: int | None = None) -> bytes:
    """The bytes of the `.wandb` log of the offline run under `run_parent/wandb/`, once
    they hold every name in `expected` (or the timeout passed: the caller's asserts then
    say what is missing). `which` picks one run by sorted position when there are
    several (a resumed stage opens another); None requires exactly one."""
    runs = sorted((Path(run_parent) / "wandb").glob("offline-run-*"))
    if which is None:
        (run_dir,) = runs
    else:
        run_dir = runs[which]
    (data_file,) = run_dir.glob("*.wandb")
    deadline = time.time() + timeout
    while not all(name in data_file.read_bytes() for name in expected) and time.time() < deadline:
        time.sleep(0.2)
    return data_file.read_bytes()
