"""A Ray Train run's placement group is freed by the driver, not by a watcher actor.

Ray Train V2 (pinned: 2.60) starts a detached `PlacementGroupCleaner` actor for every run.
It polls the state API (HTTP, through the dashboard) once a second to learn whether the
controller died, because a placement group outlives the actor that created it: measured
here, a controller killed by `ray.kill` leaves its CPUs reserved until the job ends. The
watcher costs a process per run: 4.4 CPU-seconds of a tiny pretraining run, plus the
dashboard's share of answering it (the suite starts dozens of runs on 2 cores).

Our driver is the one place that always learns of the controller's death: `fit` raises
(ActorDiedError, or KeyboardInterrupt after stages/training/ctrl_c.py killed it). So the
controller only records its placement group's id, in Ray's internal key-value store under
a key of this run, and the driver removes that group when `fit` ends if it is still held.
A driver that dies takes its job's placement groups with it, as before.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import ray
from ray.experimental.internal_kv import _internal_kv_del, _internal_kv_get, _internal_kv_put
from ray.train.v2._internal.callbacks.placement_group_callback import PlacementGroupCleanerCallback
from ray.train.v2._internal.execution.callback import WorkerGroupCallback

KV_NAMESPACE = "pretrain-pipeline"
STATES_STILL_HELD = ("PENDING", "PREPARED", "CREATED", "RESCHEDULING")


class PlacementGroupRecorder(WorkerGroupCallback):
    """Runs in the controller: stores each new worker group's placement group id under
    `key` (a restarted worker group gets a new group; the controller removed the old)."""

    def __init__(self, key: str):
        self.key = key

    def after_worker_group_start(self, worker_group) -> None:
        group = worker_group.get_worker_group_state().placement_group_handle.placement_group
        _internal_kv_put(self.key, group.id.hex(), overwrite=True, namespace=KV_NAMESPACE)


def recording_placement_group(trainer_class: type, key: str) -> type:
    """A subclass of the Ray Train V2 trainer `trainer_class` whose controller records its
    placement group under `key` instead of starting a PlacementGroupCleaner."""
    assert hasattr(trainer_class, "_create_default_callbacks"), (
        "Ray Train no longer has DataParallelTrainer._create_default_callbacks: "
        "update stages/training/placement_group_guard.py for this Ray version")

    class RecordingPlacementGroup(trainer_class):
        def _create_default_callbacks(self):
            callbacks = super()._create_default_callbacks()
            kept = [c for c in callbacks if not isinstance(c, PlacementGroupCleanerCallback)]
            assert len(kept) == len(callbacks) - 1, (
                "Ray Train's default callbacks no longer hold exactly one PlacementGroupCleanerCallback: "
                "update stages/training/placement_group_guard.py for this Ray version")
            return [*kept, PlacementGroupRecorder(key)]

    RecordingPlacementGroup.__name__ = RecordingPlacementGroup.__qualname__ = trainer_class.__name__
    return RecordingPlacementGroup


def new_run_key() -> str:
    return f"placement-group/{uuid.uuid4().hex}"


@contextmanager
def placement_group_freed(key: str) -> Iterator[None]:
    """Around `fit` on the driver: afterwards, however it ended, remove the placement
    group the run's controller recorded under `key` if nothing removed it."""
    try:
        yield
    finally:
        remove_if_held(key)


def remove_if_held(key: str) -> bool:
    """Remove the placement group recorded under `key` if it is still held; forget the
    key. True when a group was removed (its controller died without removing it)."""
    from ray._raylet import PlacementGroupID
    from ray.util.placement_group import PlacementGroup, placement_group_table, remove_placement_group

    if not ray.is_initialized():
        return False
    recorded = _internal_kv_get(key, namespace=KV_NAMESPACE)
    if recorded is None:
        return False
    _internal_kv_del(key, namespace=KV_NAMESPACE)
    group = PlacementGroup(PlacementGroupID(bytes.fromhex(recorded.decode())))
    if placement_group_table(group).get("state") not in STATES_STILL_HELD:
        return False
    remove_placement_group(group)
    return True
