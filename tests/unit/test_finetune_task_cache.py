"""Per-task fingerprints (no Ray): what changes a task's fingerprint and what does not,
and a finished task is copied from a sibling stage directory only when its fingerprint
matches, its curves along with it. How many tasks train at once."""

from __future__ import annotations

import json

import pytest

from stages.finetune.config import FinetuneConfig
from stages.finetune.outputs import write_task_metrics
from stages.finetune.run import parallel_task_slots
from stages.finetune.task_cache import (
    FINGERPRINT_NAME, reuse_finished_task, task_fingerprint, write_task_fingerprint,
)
from stages.tracking import MetricsLog
from tests.support.model_sources import folder_source


@pytest.fixture
def source(tmp_path):
    model = tmp_path / "pretrain" / "model"
    model.mkdir(parents=True)
    (model / "model.safetensors").write_bytes(b"weights")
    return folder_source(model)


def fingerprint(source, task="sst2", seed=0, **config):
    return task_fingerprint(task, FinetuneConfig(**{"tasks": ["sst2"], **config}), seed=seed, source=source)


def test_only_what_changes_a_tasks_results_changes_its_fingerprint(source):
    base = fingerprint(source)
    # The task list and scheduling knobs: same fingerprint.
    assert fingerprint(source, tasks=["sst2", "rte"], max_parallel_tasks=2, max_failures=3) == base
    # The task, a hyperparameter, the seed, the weights: another fingerprint.
    assert fingerprint(source, task="rte") != base
    assert fingerprint(source, lr=1e-4) != base
    assert fingerprint(source, seed=1) != base
    with open(f"{source.path}/model.safetensors", "ab") as f:
        f.write(b"retrained")
    assert fingerprint(source) != base


def finished_task(stage_dir, task: str, fingerprint: str, accuracy: float):
    write_task_fingerprint(stage_dir / task, fingerprint)
    (stage_dir / task / "wandb").mkdir()
    write_task_metrics(stage_dir / task, {"task": task, "accuracy": accuracy})
    MetricsLog(stage_dir / "metrics.jsonl").log({"task": task, "step": 5, "loss": 0.5})


def test_a_finished_task_is_copied_only_with_the_same_fingerprint(tmp_path):
    finetune = tmp_path / "finetune"
    finished_task(finetune / "old", "sst2", "fp-sst2", 0.8)
    finished_task(finetune / "old", "rte", "fp-rte-other-lr", 0.6)
    new_log = MetricsLog(finetune / "new" / "metrics.jsonl")

    assert reuse_finished_task(finetune / "new" / "sst2", "fp-sst2", new_log) == finetune / "old" / "sst2"
    assert json.loads((finetune / "new" / "sst2" / "metrics.json").read_text())["accuracy"] == 0.8
    assert (finetune / "new" / "sst2" / FINGERPRINT_NAME).is_file()
    assert not (finetune / "new" / "sst2" / "wandb").exists()  # the old run's tracking stays there
    assert [(r["task"], r["step"]) for r in new_log.read()] == [("sst2", 5)]

    assert reuse_finished_task(finetune / "new" / "rte", "fp-rte", new_log) is None
    assert not (finetune / "new" / "rte").exists()


def test_an_unfinished_task_is_not_copied(tmp_path):
    write_task_fingerprint(tmp_path / "finetune" / "old" / "sst2", "fp-sst2")  # no metrics.json
    assert reuse_finished_task(tmp_path / "finetune" / "new" / "sst2", "fp-sst2") is None


@pytest.mark.parametrize("config, num_tasks, resources, slots", [
    ({"max_parallel_tasks": 3}, 2, {"CPU": 1}, 2),  # asked for: the cluster queues the rest
    ({"max_parallel_tasks": 3}, 1, {"CPU": 8}, 1),
    ({"num_workers": 2}, 3, {"CPU": 2}, 1),  # this machine at the defaults: one at a time
    ({"num_workers": 1}, 3, {"CPU": 2}, 2),
    ({"num_workers": 2}, 5, {"CPU": 16}, 5),
    ({"num_workers": 2, "gpus_per_worker": 1}, 4, {"CPU": 16, "GPU": 4}, 2),
    ({"num_workers": 1, "gpus_per_worker": 1}, 2, {"CPU": 16}, 1),  # no GPU listed (yet)
    ({"num_workers": 1}, 3, {}, 1),  # no Ray started: fit() starts its own
])
def test_parallel_slots_follow_the_config_or_the_cluster(config, num_tasks, resources, slots):
    assert parallel_task_slots(FinetuneConfig(**config), num_tasks, resources) == slots
