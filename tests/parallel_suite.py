"""`make test`: the suite as two pytest processes side by side.

    python -m tests.parallel_suite                  # what `make test` runs
    python -m tests.parallel_suite tests/unit -x    # any other arguments: one plain pytest

The tests marked `ray` (integration and e2e: they share one Ray instance) spend much of
their time starting Ray Train workers, importing torch and waiting on them, and leave
part of the two cores idle; the unit tests (no Ray) need about a quarter of the suite's
time. So the Ray part runs here with its output shown live, the unit part beside it in
a second process with its output kept in a file and printed when it ends.

The suite fails if either part fails: any exit status but 0 and 5 (pytest's "no tests
collected"). A part killed by a signal (an out-of-memory kill, a segfault) counts as
128 + the signal's number, as a shell reports it, with a line naming the part and the
signal. The last line ends with both parts' counts added up ("812 passed, 0 failed,
3 skipped"), which each pytest writes through the plugin tests/suite_counts.py; a part
whose counts cannot be read (it died before its summary) fails the suite too.

The unit part gets a pytest `--basetemp` of its own, so that neither process's cleanup
of old numbered temp folders can remove the other's. With arguments (a file, `-k`,
`-m`), the split would only get in the way: they go to one ordinary pytest.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

NO_TESTS_COLLECTED = 5  # pytest's exit status when a selection is empty
PYTEST = [sys.executable, "-m", "pytest"]


def main(argv: list[str], pytest: list[str] | None = None) -> int:
    """Run the suite; `pytest` is the command that starts a pytest (tests give another)."""
    pytest = pytest or PYTEST
    if argv:
        return exit_status("pytest", subprocess.call([*pytest, *argv]))
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="pytest-unit-") as unit_temp:
        temp = Path(unit_temp)
        log_path, ray_counts, unit_counts = temp / "unit.log", temp / "ray.json", temp / "unit.json"
        with open(log_path, "w") as log:
            unit = subprocess.Popen(
                [*pytest, "-m", "not ray", "-p", "no:cacheprovider", f"--basetemp={unit_temp}/tmp",
                 *counts_options(unit_counts)],
                stdout=log, stderr=subprocess.STDOUT)
            try:
                ray_status = subprocess.call([*pytest, "-m", "ray", *counts_options(ray_counts)])
                unit_status = unit.wait()
            finally:
                if unit.poll() is None:
                    unit.kill()
        print("\n" + "=" * 30 + " unit tests (no Ray), run alongside " + "=" * 30, flush=True)
        print(log_path.read_text(), flush=True)
        halves = [("the Ray tests' pytest", ray_status, read_counts(ray_counts)),
                  ("the unit tests' pytest", unit_status, read_counts(unit_counts))]
    statuses = [exit_status(name, status) for name, status, _ in halves]
    unread = [name for name, _, counts in halves if counts is None]
    for name in unread:
        print(f"suite: {name} wrote no counts (it ended before its summary): the suite fails",
              flush=True)
    summary = (f"suite: Ray tests exit {ray_status}, unit tests exit {unit_status}; "
               f"{time.monotonic() - started:.0f} s wall in all; ")
    if unread:
        print(summary + f"counts unknown ({' and '.join(unread)} wrote none)", flush=True)
        return max(statuses) or 1
    print(summary + count_line([counts for _, _, counts in halves]), flush=True)
    return max(statuses)


def counts_options(path: Path) -> list[str]:
    return ["-p", "tests.suite_counts", f"--suite-counts={path}"]


def exit_status(what: str, status: int) -> int:
    """The suite's exit status, given that of `what` ("the unit tests' pytest"): 0 for
    success or an empty selection, the shell's 128 + N for a process killed by signal N
    (subprocess's negative status, which max() over statuses would take for success),
    else the status itself."""
    if status == NO_TESTS_COLLECTED:
        return 0
    if status < 0:
        number = -status
        try:
            signal_name = signal.Signals(number).name
        except ValueError:
            signal_name = "an unnamed signal"
        print(f"suite: {what} was killed by {signal_name} (signal {number}); "
              f"exit status {128 + number}", flush=True)
        return 128 + number
    return status


def read_counts(path: Path) -> dict[str, int] | None:
    try:
        counts = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return counts if isinstance(counts, dict) else None


def count_line(parts: list[dict[str, int]]) -> str:
    """'N passed, M failed, K skipped' summed over the parts, after any errors (setup,
    teardown, collection), xfailed and xpassed, so the line always ends the same way."""
    total = {key: sum(int(part.get(key, 0)) for part in parts)
             for key in ("error", "xfailed", "xpassed", "passed", "failed", "skipped")}
    extra = [f"{total['error']} error{'s' if total['error'] != 1 else ''}"] if total["error"] else []
    extra += [f"{total[key]} {key}" for key in ("xfailed", "xpassed") if total[key]]
    main_counts = f"{total['passed']} passed, {total['failed']} failed, {total['skipped']} skipped"
    return ", ".join([*extra, main_counts])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
