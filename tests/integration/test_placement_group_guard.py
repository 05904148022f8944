"""A Ray Train run whose controller is killed (one Ctrl-C, stages/training/ctrl_c.py) still
gives its CPUs back: the controller recorded its placement group, and `fit` removed it on
the way out, without Ray Train's per-run PlacementGroupCleaner actor; the record a killed
driver left behind is forgotten by the next run. Real Ray (the
session instance), a real 1-worker run through stages.training.launch.fit."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest

from tests.support.fault_injection import wait_forever_after_marking

pytestmark = pytest.mark.ray


def held_groups(ray) -> list[dict]:
    from ray.util.placement_group import placement_group_table

    return [group for group in placement_group_table().values() if group["state"] != "REMOVED"]


def removed_group_id(ray) -> str:
    from ray.util.placement_group import placement_group, remove_placement_group

    group = placement_group([{"CPU": 1}])
    ray.get(group.ready(), timeout=60)
    remove_placement_group(group)
    return group.id.hex()


def interrupt_once_training_started(marker: Path) -> None:
    deadline = time.monotonic() + 120
    while not marker.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    os.kill(os.getpid(), signal.SIGINT)


def test_a_killed_controllers_placement_group_is_removed_by_fit(ray_session, tmp_path):
    from ray.experimental.internal_kv import _internal_kv_list, _internal_kv_put

    from stages.training.launch import fit
    from stages.training.placement_group_guard import KV_NAMESPACE

    ray = ray_session
    assert not held_groups(ray)
    # A record left by a killed driver whose job took its group along: forgotten by this run.
    stale_key = f"placement-group/stale-{tmp_path.name}"
    _internal_kv_put(stale_key, removed_group_id(ray), namespace=KV_NAMESPACE)
    marker = tmp_path / "started"
    interrupter = threading.Thread(target=interrupt_once_training_started, args=(marker,), daemon=True)
    interrupter.start()
    with pytest.raises(KeyboardInterrupt):
        fit(wait_forever_after_marking, {"marker": str(marker)}, num_workers=1, storage_path=tmp_path / "ray",
            run_name="interrupted")
    interrupter.join()
    assert marker.exists()  # the worker group (and its placement group) had started

    assert not held_groups(ray), held_groups(ray)
    assert not _internal_kv_list("placement-group/", namespace=KV_NAMESPACE)
    deadline = time.monotonic() + 30
    while ray.available_resources().get("CPU") != ray.cluster_resources()["CPU"]:
        assert time.monotonic() < deadline, ray.available_resources()
        time.sleep(0.2)


def test_one_node_runs_start_no_preemption_watcher_unless_the_user_asks(ray_session, monkeypatch):
    from stages.training.launch import PREEMPTION_WATCHER_ENV, preemption_watcher_if_multinode

    monkeypatch.delenv(PREEMPTION_WATCHER_ENV, raising=False)
    with preemption_watcher_if_multinode():
        assert os.environ[PREEMPTION_WATCHER_ENV] == "0"  # what Ray Train hands the controller
    assert PREEMPTION_WATCHER_ENV not in os.environ
    monkeypatch.setenv(PREEMPTION_WATCHER_ENV, "1")
    with preemption_watcher_if_multinode():
        assert os.environ[PREEMPTION_WATCHER_ENV] == "1"
