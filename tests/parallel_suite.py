"""`make test`: the suite as two lanes side by side.

    python -m tests.parallel_suite                  # what `make test` runs
    python -m tests.parallel_suite tests/unit -x    # any other arguments: one plain pytest

The tests marked `ray` (integration and e2e: they share one Ray instance) spend much of
their time starting Ray Train workers, importing torch and waiting on them, and leave
part of the two cores idle. So they run here with their output shown live, and beside
them, one after the other in a second lane with their output kept in files and printed
at the end: the unit tests (no Ray; about a quarter of the suite's time), then the tests
marked `own_ray` (they start a Ray head of their own on their own ports and temp dir, so
they can run beside the shared one). The exit status is the worst of the three.

Each pytest of the second lane gets a `--basetemp` of its own, so that no process's
cleanup of old numbered temp folders can remove another's. With arguments (a file, `-k`,
`-m`), the split would only get in the way: they go to one ordinary pytest.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

NO_TESTS_COLLECTED = 5  # pytest's exit status when a selection is empty


def main(argv: list[str]) -> int:
    pytest = [sys.executable, "-m", "pytest"]
    if argv:
        return subprocess.call([*pytest, *argv])
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="pytest-unit-") as unit_temp:
        side = SideLane(pytest, Path(unit_temp))
        side.start()
        try:
            ray_status = subprocess.call([*pytest, "-m", "ray"])
        finally:
            side.join()
        statuses = [ray_status, *side.statuses]
        for title, log_path in side.logs:
            print("\n" + "=" * 30 + f" {title}, run alongside " + "=" * 30, flush=True)
            print(log_path.read_text() if log_path.is_file() else "(not run)", flush=True)
    statuses = [0 if status == NO_TESTS_COLLECTED else status for status in statuses]
    print(f"suite: exit statuses {statuses} (Ray tests, unit tests, own-Ray tests); "
          f"{time.monotonic() - started:.0f} s wall in all", flush=True)
    return max(statuses)


class SideLane(threading.Thread):
    """The unit tests, then the tests that start their own Ray (`own_ray`: a `ray start`
    head of their own, never the shared one), one pytest after the other, each with its
    own --basetemp and log. The own-Ray tests come last so that they overlap the second
    half of the Ray tests, when the unit tests have left a core idle."""

    LANES = (("unit tests (no Ray)", "not ray and not own_ray"), ("tests with their own Ray", "own_ray"))

    def __init__(self, pytest: list[str], temp: Path):
        super().__init__(daemon=True)
        self.pytest, self.temp = pytest, temp
        self.logs = [(title, temp / f"lane-{i}.log") for i, (title, _) in enumerate(self.LANES)]
        self.statuses: list[int] = []

    def run(self) -> None:
        for i, (_, marker) in enumerate(self.LANES):
            with open(self.logs[i][1], "w") as log:
                self.statuses.append(subprocess.call(
                    [*self.pytest, "-m", marker, "-p", "no:cacheprovider", f"--basetemp={self.temp}/tmp-{i}"],
                    stdout=log, stderr=subprocess.STDOUT))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
