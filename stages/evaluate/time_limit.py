"""A wall-clock limit on a block of code, for work whose time depends on its input (a task
spec's template rendering a row: a regex that backtracks catastrophically runs for hours).

    with time_limit(10.0):          # raises TimeLimitExceeded after 10 s
        text = template.render(**row)

SIGALRM interrupts Python code and the regex engine alike (`re` checks for signals while it
backtracks). Signals reach only the main thread, so in another thread, or where there is
no SIGALRM, the block runs unbounded; Ray runs a task's function in its worker's main
thread. An alarm already set (pytest-timeout's) is kept: it fires at its own time, and a
shorter one than ours is left to fire instead.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Iterator


class TimeLimitExceeded(BaseException):
    """The block ran past its limit (and was stopped there). A BaseException, like
    KeyboardInterrupt, so that no `except Exception` on the way swallows it: Jinja's
    compiler catches any Exception from the constant folding it tries, and would then
    run the same expression again, with no alarm left to stop it."""


@contextlib.contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    if not hasattr(signal, "setitimer") or threading.current_thread() is not threading.main_thread():
        yield
        return
    started = time.monotonic()
    earlier_delay, earlier_interval = signal.getitimer(signal.ITIMER_REAL)
    if earlier_delay and earlier_delay <= seconds:
        yield  # the earlier alarm comes first anyway
        return

    def expire(signum, frame):
        raise TimeLimitExceeded(f"stopped after {seconds:g} s")

    earlier_handler = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, earlier_handler)
        if earlier_delay:
            left = earlier_delay - (time.monotonic() - started)
            signal.setitimer(signal.ITIMER_REAL, max(left, 1e-3), earlier_interval)
