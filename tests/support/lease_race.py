"""Two drivers taking over one silent stage lease at the same moment (object-store tests)."""

from __future__ import annotations

import threading

from storage.writer_lock import StageLocked


def race(contenders: list) -> list[object]:
    """Each contender's `acquire()` started together, one thread each; per contender,
    "won" or the StageLocked it raised."""
    barrier = threading.Barrier(len(contenders))
    outcomes: list[object] = [None] * len(contenders)

    def contend(i: int) -> None:
        barrier.wait()
        try:
            contenders[i].acquire()
            outcomes[i] = "won"
        except StageLocked as error:
            outcomes[i] = error

    threads = [threading.Thread(target=contend, args=(i,)) for i in range(len(contenders))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    return outcomes
