"""map_where_files_are in this process from several threads at once (fine-tuning trains tasks in
threads, and each finishes its task through map_where_files_are): no thread may leave a flag
behind that sends every later map_tasks of the process into this process."""

from __future__ import annotations

import threading

import stages.ray_tasks as ray_tasks

first_inside, first_done = threading.Barrier(2), threading.Event()


def overlapping(name: str) -> str:
    """Both calls are inside map_where_files_are together; the first one leaves first."""
    first_inside.wait(timeout=10)
    if name == "second":
        first_done.wait(timeout=10)
    return name


def test_calls_from_two_threads_that_overlap_leave_no_in_process_flag_behind():
    results = {}

    def call(name: str) -> None:
        results[name] = ray_tasks.map_where_files_are(overlapping, [name], desc=name)
        if name == "first":
            first_done.set()

    threads = [threading.Thread(target=call, args=(name,)) for name in ("first", "second")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=20)
    assert results == {"first": ["first"], "second": ["second"]}
    assert ray_tasks._force_in_process is False
