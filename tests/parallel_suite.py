"""`make test`: the suite as two pytest processes side by side.

    python -m tests.parallel_suite                  # what `make test` runs
    python -m tests.parallel_suite tests/unit -x    # any other arguments: one plain pytest

The tests marked `ray` (integration and e2e: they share one Ray instance) spend much of
their time starting Ray Train workers, importing torch and waiting on them, and leave
part of the two cores idle; the unit tests (no Ray) need about a quarter of the suite's
time. So the Ray part runs here with its output shown live, the unit part beside it in
a second process with its output kept in a file and printed when it ends. The exit
status is the worse of the two.

The unit part gets a pytest `--basetemp` of its own, so that neither process's cleanup
of old numbered temp folders can remove the other's. With arguments (a file, `-k`,
`-m`), the split would only get in the way: they go to one ordinary pytest.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

NO_TESTS_COLLECTED = 5  # pytest's exit status when a selection is empty


def main(argv: list[str]) -> int:
    pytest = [sys.executable, "-m", "pytest"]
    if argv:
        return subprocess.call([*pytest, *argv])
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="pytest-unit-") as unit_temp:
        log_path = Path(unit_temp) / "unit.log"
        with open(log_path, "w") as log:
            unit = subprocess.Popen(
                [*pytest, "-m", "not ray", "-p", "no:cacheprovider", f"--basetemp={unit_temp}/tmp"],
                stdout=log, stderr=subprocess.STDOUT)
            try:
                ray_status = subprocess.call([*pytest, "-m", "ray"])
                unit_status = unit.wait()
            finally:
                if unit.poll() is None:
                    unit.kill()
        print("\n" + "=" * 30 + " unit tests (no Ray), run alongside " + "=" * 30, flush=True)
        print(log_path.read_text(), flush=True)
    statuses = [0 if status == NO_TESTS_COLLECTED else status for status in (ray_status, unit_status)]
    print(f"suite: Ray tests exit {ray_status}, unit tests exit {unit_status}; "
          f"{time.monotonic() - started:.0f} s wall in all", flush=True)
    return max(statuses)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
