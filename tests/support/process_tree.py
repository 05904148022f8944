"""End processes a test started, with everything they started: a `ray start --head --block`
head (end_process_tree), or a driver's whole process group (kill_process_group)."""

from __future__ import annotations

import subprocess

import psutil


def end_process_tree(head: subprocess.Popen) -> None:
    try:
        processes = [psutil.Process(head.pid), *psutil.Process(head.pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        return
    head.terminate()  # `ray start --block` stops what it started on SIGTERM
    # A short grace: whatever ignores SIGTERM is killed next, and waiting longer only
    # adds to the suite (it was 20 s, spent whole by a process that never exits on its own).
    _, alive = psutil.wait_procs(processes, timeout=5)
    for process in alive:  # e.g. a job driver or an agent that outlived its parent
        try:
            process.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(alive, timeout=10)


def kill_process_group(leader: subprocess.Popen) -> None:
    """SIGKILL a process started with start_new_session=True and its whole group (as a
    scheduler or a lost machine would), and any descendant that left the group."""
    import os
    import signal

    try:
        tree = [psutil.Process(leader.pid), *psutil.Process(leader.pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        return
    os.killpg(leader.pid, signal.SIGKILL)
    for process in tree:
        try:
            process.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(tree, timeout=10)
