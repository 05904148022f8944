"""A training worker that is about to lose its node saves a checkpoint at the next step
boundary and stops, so that the run loses no step (worker side).

    watch = PreemptionWatch.start()                    # before the loop, every rank
    while step < max_steps:
        ...one step...
        stop = watch.stop_requested()                  # collective: every rank, every step
        if stop or checkpoint due:
            report_checkpoint(...)                     # stages/training/checkpoint.py
        if stop:
            watch.stop(step)                           # raises Preempted
    watch.close()

Two warnings reach a worker:

- SIGTERM, what a scheduler, a kubelet or a machine shutting down sends before it kills.
  Ray's own handler exits the worker at once, and Ray Train restarts the run from the last
  periodic checkpoint: every step since is lost. Ours only sets a flag; a second SIGTERM
  goes to Ray's handler (exit at once), as before. A Ray Train worker runs the loop in a
  thread, and only the main thread may install a signal handler: the worker actor's main
  thread is idle while the loop runs, so the handler is installed by a call on the actor
  itself (`__ray_call__`). The driver's SIGTERM (pipeline/interrupts.py: SIGTERM is
  Ctrl-C, which kills the run's controller at once, stages/training/ctrl_c.py) is another
  process and is not touched; Ray Train ends its workers with ray.kill, not a signal.
- A drain of a node of the worker group (GCS drain_node with reason preemption: the
  autoscaler, KubeRay, `ray drain-node`, a cloud's spot notice). Ray Train 2.60's
  PreemptionWatcher actor polls the GCS for draining nodes (every
  RAY_TRAIN_PREEMPTION_POLL_INTERVAL_S, 5 s by default; launch.py keeps it on multi-node
  clusters only) and marks every worker of the group. The mark is read here from the
  worker's own train context, an attribute: the public `ray.train.get_preemption_info()`
  is a barrier through an actor, too dear for every step.

Every rank calls `stop_requested` at every step boundary: one all_reduce(MAX) of one
integer, so that all ranks take the same decision (the checkpoint is collective). It runs
on the CPU over gloo: with NCCL, a reduction on the GPU and its `.item()` would make the
host wait for the step's queued GPU work every step, so a gloo group is made for it. Then
every rank raises Preempted: Ray Train counts it as a worker failure and restarts the
worker group from the checkpoint just committed (pretrain.max_failures), on nodes that
are not draining; with no restart left the stage fails, and `pretrain run` resumes from
that checkpoint. At the last step the run simply ends.
"""

from __future__ import annotations

import logging
import signal
import sys
import threading
import time
from typing import Any

import torch
import torch.distributed as dist

logger = logging.getLogger(__name__)

_requested = threading.Event()  # set by the first SIGTERM
_previous_handlers: list[Any] = []  # what our handler replaced (Ray's): for the second SIGTERM and close()


class Preempted(RuntimeError):
    """Raised on every rank after the checkpoint of a preemption: Ray Train restarts the
    worker group from it."""


class PreemptionWatch:
    """This worker's view of a coming preemption (module doc). One per training loop."""

    def __init__(self, read_drain_mark, group=None) -> None:
        self._read_drain_mark = read_drain_mark
        self._group = group  # a gloo process group, or None for the default one (or none at all)
        self.reason: str | None = None  # "SIGTERM" or "node drain", once a stop is agreed
        self.check_seconds = 0.0  # spent in stop_requested, for measuring its cost
        self.checks = 0

    @classmethod
    def start(cls) -> PreemptionWatch:
        """Install the SIGTERM handler in this process and find Ray Train's drain mark."""
        _requested.clear()
        _on_main_thread(_install_handler)
        group = None
        if dist.is_available() and dist.is_initialized() and dist.get_backend() != "gloo":
            group = dist.new_group(backend="gloo")  # collective: every rank starts its watch
        return cls(_drain_mark_reader(), group)

    def stop_requested(self) -> bool:
        """Whether any rank was told its node goes away. Collective: every rank calls it
        at the same step."""
        started = time.perf_counter()
        local = 1 if _requested.is_set() else 2 if self._read_drain_mark() else 0
        flag = torch.tensor([local], dtype=torch.int32)
        if dist.is_available() and dist.is_initialized():
            dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=self._group)
        agreed = int(flag.item())
        self.check_seconds += time.perf_counter() - started
        self.checks += 1
        if agreed and self.reason is None:
            self.reason = "node drain" if agreed == 2 else "SIGTERM"
        return bool(agreed)

    def stop(self, step: int) -> None:
        """After the preemption checkpoint of `step`: leave the loop for Ray Train."""
        self.close()
        raise Preempted(f"stopped after step {step} on {self.reason} (a node of the run is going away); "
                        f"the checkpoint of step {step} is committed and the run resumes from it")

    def close(self) -> None:
        """Put Ray's SIGTERM handler back (the loop is over)."""
        _on_main_thread(_uninstall_handler)


def _on_sigterm(signum, frame) -> None:
    if _requested.is_set():  # the second one: stop at once, as Ray's handler does
        previous = _previous_handlers[-1] if _previous_handlers else signal.SIG_DFL
        if callable(previous):
            previous(signum, frame)
        else:
            signal.signal(signal.SIGTERM, previous)
            signal.raise_signal(signal.SIGTERM)
        return
    _requested.set()
    print("[pretrain] SIGTERM: saving a checkpoint at the end of this step, then stopping "
          "(a second SIGTERM stops at once)", file=sys.stderr, flush=True)


def _install_handler(_actor=None) -> None:
    if signal.getsignal(signal.SIGTERM) is not _on_sigterm:
        _previous_handlers.append(signal.signal(signal.SIGTERM, _on_sigterm))


def _uninstall_handler(_actor=None) -> None:
    if signal.getsignal(signal.SIGTERM) is _on_sigterm and _previous_handlers:
        signal.signal(signal.SIGTERM, _previous_handlers.pop())


def _on_main_thread(function) -> None:
    """Run `function` on this process's main thread: here, or through the Ray actor this
    thread runs in (its main thread executes the actor's calls, and is idle while a Ray
    Train worker trains). Outside both (a thread of a plain process), SIGTERM keeps its
    handler."""
    if threading.current_thread() is threading.main_thread():
        function()
        return
    import ray

    try:
        actor = ray.get_runtime_context().current_actor
    except RuntimeError:  # not in an actor
        logger.warning("not on the main thread nor in a Ray actor: SIGTERM stops at once, without a checkpoint")
        return
    # A module-level function travels by reference and runs in this very process.
    ray.get(actor.__ray_call__.remote(function))


def _drain_mark_reader():
    """A function returning whether Ray Train marked this worker's group as preempted;
    always False outside a Ray Train worker (or if Ray Train moved its mark)."""
    try:
        from ray.train.v2._internal.execution.context import get_train_context

        context = get_train_context().preemption_context
    except Exception as error:  # noqa: BLE001 - any change of Ray's internals: no drain warning, said once
        logger.warning("node drains are not watched (Ray Train's preemption mark is unavailable: %s); "
                       "SIGTERM still checkpoints", error)
        return lambda: False
    return lambda: context.preemption_info is not None
