"""A pytest plugin for tests/parallel_suite.py: `-p tests.suite_counts --suite-counts=PATH`
writes the session's outcome counts to PATH as JSON when the session ends, the same
numbers as pytest's own summary line ("3 passed, 1 failed, 2 skipped"), so the suite can
add up its two pytest processes without parsing their terminal output. A process that
dies before its summary writes nothing, and the suite says so."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

OUTCOMES = ("passed", "failed", "skipped", "error", "xfailed", "xpassed")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--suite-counts", metavar="PATH", default=None,
                     help="write this session's outcome counts to PATH as JSON")


def pytest_terminal_summary(terminalreporter, exitstatus, config: pytest.Config) -> None:
    path = config.getoption("suite_counts")
    if not path:
        return
    # As pytest's summary line counts them: reports that count towards the summary.
    counts = {outcome: sum(1 for report in terminalreporter.stats.get(outcome, [])
                           if getattr(report, "count_towards_summary", True))
              for outcome in OUTCOMES}
    Path(path).write_text(json.dumps(counts) + "\n", encoding="utf-8")
