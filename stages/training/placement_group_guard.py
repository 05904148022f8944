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
A driver that dies takes its job's placement groups with it, as before; the record it
leaves is forgotten by the next run's driver (`forget_finished_records`), so a long-lived
cluster's key-value store does not collect one key per killed driver.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import ray
from ray.experimental.internal_kv import _internal_kv_del, _internal_kv_get, _internal_kv_list, _internal_kv_put
from ray.train.v2._internal.callbacks.placement_group_callback import PlacementGroupCleanerCallback
from ray.train.v2._internal.execution.callback import WorkerGroupCallback

KV_NAMESPACE = "pretrain-pipeline"
KEY_PREFIX = "placement-group/"
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
    return f"{KEY_PREFIX}{uuid.uuid4().hex}"


@contextmanager
def placement_group_freed(key: str) -> Iterator[None]:
    """Around `fit` on the driver: afterwards, however it ended, remove the placement
    group the run's controller recorded under `key` if nothing removed it. Before, forget
    the records of runs whose groups are gone (their drivers were killed)."""
    forget_finished_records()
    try:
        yield
    finally:
        remove_if_held(key)


def forget_finished_records() -> int:
    """Delete every record whose placement group is no longer held (a run whose driver
    died before its `finally`; Ray removed the group with the driver's job). Records of
    runs still going are kept. Returns how many were deleted."""
    from ray.util.placement_group import placement_group_table

    if not ray.is_initialized():
        return 0
    forgotten = 0
    for key in _internal_kv_list(KEY_PREFIX, namespace=KV_NAMESPACE):
        recorded = _internal_kv_get(key, namespace=KV_NAMESPACE)
        if recorded is not None and placement_group_table(_group(recorded)).get("state") in STATES_STILL_HELD:
            continue
        _internal_kv_del(key, namespace=KV_NAMESPACE)
        forgotten += 1
    return forgotten


def _group(recorded: bytes):
    from ray._raylet import PlacementGroupID
    from ray.util.placement_group import PlacementGroup

    return PlacementGroup(PlacementGroupID(bytes.fromhex(recorded.decode())))


def remove_if_held(key: str) -> bool:
    """Remove the placement group recorded under `key` if it is still held; forget the
    key. True when a group was removed (its controller died without removing it)."""
    from ray.util.placement_group import placement_group_table, remove_placement_group

    if not ray.is_initialized():
        return False
    recorded = _internal_kv_get(key, namespace=KV_NAMESPACE)
    if recorded is None:
        return False
    _internal_kv_del(key, namespace=KV_NAMESPACE)
    group = _group(recorded)
    if placement_group_table(group).get("state") not in STATES_STILL_HELD:
        return False
    remove_placement_group(group)
    return True
