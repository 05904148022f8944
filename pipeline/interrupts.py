"""How a run stops when told to from outside: SIGTERM is Ctrl-C, and a sweep's point
stops when its sweep driver dies.

A scheduler, Kubernetes, `kill` or a sweep driver stops a process with SIGTERM. Left to
itself, Python dies on the spot (no message, a stage lock left until it expires), and once
Ray has started, Ray's handler calls sys.exit, which is not the Ctrl-C path that kills a
Ray Train run at once (stages/training/ctrl_c.py). Within `sigterm_as_ctrl_c()`, SIGTERM
goes down the Ctrl-C path instead, and `interrupted_exit_code()` is 143 (128 + SIGTERM)
where Ctrl-C's is 130. `ray.init` installs Ray's handler again each time, so
pipeline/ray_session.py calls `reinstall()` once Ray is up.

A sweep runs each point as a child `pretrain run` (sweep/children.py) and
stops them itself on Ctrl-C or SIGTERM. When the driver is SIGKILLed (the OOM killer, a
lost node) none of its code runs, so each child watches it: `exit_with_parent()` stops
the child as SIGTERM would when its parent is gone, and kills it (and its process group)
if it has not stopped STOP_GRACE_S later. Polling the parent pid works where prctl's
PR_SET_PDEATHSIG would not: that signal follows the parent *thread*, and the sweep starts
points from a pool of threads.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from contextlib import contextmanager

# Set by a sweep driver for its children: the pid whose death ends them.
PARENT_ENV = "PRETRAIN_EXIT_WITH_PARENT"
PARENT_POLL_S = 0.5
# A child whose parent died gets this long to stop as on Ctrl-C (kill the Ray Train run,
# release its stage locks) before it is killed: the Ray it joined may have died too.
STOP_GRACE_S = 30.0

_installed: list = []  # the SIGTERM handlers to put back, innermost last
_received: list[int] = []  # the signal that interrupted the current scope, if SIGTERM


@contextmanager
def sigterm_as_ctrl_c():
    """Within: SIGTERM raises KeyboardInterrupt through the current Ctrl-C handler. Only the
    main thread has signal handlers; elsewhere this does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _installed.append(signal.getsignal(signal.SIGTERM))
    _received.clear()
    signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, _installed.pop())


def reinstall() -> None:
    """Put our SIGTERM handler back after `ray.init` replaced it with Ray's (sys.exit)."""
    if _installed and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _on_sigterm)


def interrupted_exit_code() -> int:
    """The exit status of a command stopped by KeyboardInterrupt: 143 when SIGTERM caused
    it, else 130 (Ctrl-C), as a shell reports a process killed by either signal."""
    return 128 + (_received[-1] if _received else signal.SIGINT)


def _on_sigterm(signum, frame) -> None:
    _received.append(signum)
    handler = signal.getsignal(signal.SIGINT)
    if callable(handler):
        # Python's own raises KeyboardInterrupt; inside Ray Train's fit, ours kills the
        # run's controller first (stages/training/ctrl_c.py).
        handler(signal.SIGINT, frame)
    raise KeyboardInterrupt  # Ctrl-C ignored here (a background job): SIGTERM still stops


def exit_with_parent() -> None:
    """When PARENT_ENV names this process's parent (a sweep driver sets it for its points),
    watch that parent from a daemon thread: once it is gone, SIGTERM this process, and
    kill its process group if it is still running STOP_GRACE_S later."""
    value = os.environ.pop(PARENT_ENV, "")  # not for whatever this process starts
    if not value.isdigit():
        return
    threading.Thread(target=_watch_parent, args=(int(value),), name="exit-with-parent", daemon=True).start()


def _watch_parent(parent_pid: int) -> None:
    while os.getppid() == parent_pid:  # once the parent dies, this process is re-parented
        time.sleep(PARENT_POLL_S)
    # stdout and stderr were pipes to the driver: writing to them now fails (BrokenPipeError)
    # anywhere, in the middle of the stopping too.
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(STOP_GRACE_S)
    # Still here: stopping hung (on a Ray that died with the driver, say).
    if os.getpgrp() == os.getpid():
        os.killpg(os.getpid(), signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)
