"""The preemption watch's SIGTERM handling, in this process (no Ray): the first SIGTERM
only asks for a checkpoint and a stop, the second goes to the handler it replaced, and
closing puts that handler back. The Ray Train run that acts on it is
tests/integration/test_pretrain_preemption.py."""

from __future__ import annotations

import dataclasses
import os
import signal

import pytest

from stages.training import preemption
from stages.training.preemption import Preempted, PreemptionWatch


@pytest.fixture
def ray_like_handler():
    """A SIGTERM handler standing for Ray's (which exits the worker): records its calls."""
    calls: list[int] = []
    before = signal.signal(signal.SIGTERM, lambda signum, frame: calls.append(signum))
    try:
        yield calls
    finally:
        signal.signal(signal.SIGTERM, before)
        preemption._previous_handlers.clear()


def test_the_first_sigterm_asks_for_a_checkpoint_and_a_stop_the_second_stops_at_once(ray_like_handler):
    watch = PreemptionWatch.start()
    assert not watch.stop_requested()
    os.kill(os.getpid(), signal.SIGTERM)
    assert ray_like_handler == []  # still alive: the loop checkpoints at its step boundary
    assert watch.stop_requested() and watch.reason == "SIGTERM"
    os.kill(os.getpid(), signal.SIGTERM)
    assert ray_like_handler == [signal.SIGTERM]
    with pytest.raises(Preempted, match="after step 7 on SIGTERM.*resumes from it"):
        watch.stop(7)
    assert signal.getsignal(signal.SIGTERM) is not preemption._on_sigterm  # Ray's is back
    os.kill(os.getpid(), signal.SIGTERM)
    assert ray_like_handler == [signal.SIGTERM] * 2


def test_a_finished_loop_puts_the_handler_back_and_a_new_one_starts_clear(ray_like_handler):
    first = PreemptionWatch.start()
    os.kill(os.getpid(), signal.SIGTERM)
    first.close()
    assert signal.getsignal(signal.SIGTERM) is not preemption._on_sigterm
    second = PreemptionWatch.start()
    assert not second.stop_requested() and second.reason is None
    second.close()
    assert second.checks == 1 and second.check_seconds > 0


def test_outside_a_ray_train_worker_no_drain_is_seen():
    assert PreemptionWatch(preemption._drain_mark_reader()).stop_requested() is False


def test_ray_train_keeps_its_drain_mark_where_the_watch_reads_it():
    """The watch reads Ray Train 2.60's per-worker preemption mark (an internal attribute,
    set by its PreemptionWatcher); a Ray upgrade that moves it must fail here, not turn
    drains silently into restarts from the last periodic checkpoint."""
    from ray.train.v2._internal.execution.context import TrainContext, get_train_context  # noqa: F401
    from ray.train.v2._internal.execution.preemption import PreemptionContext

    assert "preemption_context" in {field.name for field in dataclasses.fields(TrainContext)}
    assert PreemptionContext().preemption_info is None
