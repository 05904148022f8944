"""Per-task tracking of the finetune stage (no Ray): records land in the stage's
metrics.jsonl marked with their task, and in one offline wandb run per task under the
task's directory, named and tagged with the task; the engine then logs no second run."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from pipeline.wandb_stage_log import log_stage
from stages.finetune.config import FinetuneConfig
from stages.finetune.job import FinetuneJob
from stages.finetune.task_tracking import TaskMetricsLog, open_task_tracker, prefixed
from stages.tracking import MetricsLog
from tests.support.wandb_offline import offline_log


def experiment(mode: str):
    wandb = SimpleNamespace(mode=mode, project="pp-tests", entity=None)
    return SimpleNamespace(name="unit", tracking=SimpleNamespace(wandb=wandb))


def job(tmp_path, task: str, mode: str) -> FinetuneJob:
    return FinetuneJob(task=task, family="glue", seed=0, config=FinetuneConfig(tasks=[task]), head_config={},
                       source={}, data=None, predict_splits=("dev",), task_dir=str(tmp_path / task),
                       metrics_log=MetricsLog(tmp_path / "metrics.jsonl"), scorers={},
                       tracking={"experiment": experiment(mode), "fingerprint": "fp0123456789"},
                       primary_metric="accuracy")


@pytest.fixture(autouse=True)
def quiet_wandb(monkeypatch):
    monkeypatch.setenv("WANDB_SILENT", "true")


def test_records_are_marked_with_their_task(tmp_path):
    log = TaskMetricsLog(tmp_path / "metrics.jsonl", "rte")
    log.log({"step": 3, "loss": 0.7})
    (record,) = log.read()
    assert record["task"] == "rte" and record["step"] == 3 and record["loss"] == 0.7
    assert prefixed("dev_", {"f1": 0.5}) == {"dev_f1": 0.5}


def test_each_task_streams_its_own_offline_run(tmp_path):
    for task, loss in (("sst2", 0.69), ("rte", 0.71)):
        tracker = open_task_tracker(job(tmp_path, task, "offline"))
        tracker.log({"epoch": 0, "loss": loss, "lr": 1e-4}, step=5)
        tracker.log({"epoch": 0, "dev_accuracy": 0.75}, step=5)
        tracker.summary({"dev_accuracy": 0.75, "train_examples": 200})
        tracker.finish()
    for task in ("sst2", "rte"):
        content = offline_log(tmp_path / task, [b"dev_accuracy"])
        # Run name and tags carry the task and the stage's fingerprint.
        assert f"unit-finetune-{task}-fp012345".encode() in content
        assert b"fp0123456789" in content and b"loss" in content and b"dev_accuracy" in content
    records = MetricsLog(tmp_path / "metrics.jsonl").read()
    assert [(r["task"], r["step"]) for r in records] == [("sst2", 5)] * 2 + [("rte", 5)] * 2
    assert not (tmp_path / "wandb").exists()  # nothing at the stage level


def test_disabled_wandb_writes_jsonl_only(tmp_path):
    tracker = open_task_tracker(job(tmp_path, "sst2", "disabled"))
    tracker.log({"loss": 0.5}, step=1)
    tracker.finish()
    assert MetricsLog(tmp_path / "metrics.jsonl").read()[0]["task"] == "sst2"
    assert not (tmp_path / "sst2" / "wandb").exists()


def test_the_engine_logs_no_second_run_for_finetune(tmp_path):
    manifest = {"stage": "finetune", "fingerprint": "fp0123456789", "metrics": {"sst2/accuracy": 0.8}}
    assert not log_stage(experiment("offline"), manifest, tmp_path)
    assert not (tmp_path / "wandb").exists()


def test_a_resume_drops_only_its_tasks_records_past_the_checkpoint(tmp_path):
    sst2, rte = (TaskMetricsLog(tmp_path / "metrics.jsonl", task) for task in ("sst2", "rte"))
    for step in (5, 10, 15):
        sst2.log({"step": step, "loss": 1.0 / step})
        rte.log({"step": step, "loss": 2.0 / step})
    sst2.drop_records_after(10)
    assert [(r["task"], r["step"]) for r in sst2.read()] == [
        ("sst2", 5), ("rte", 5), ("sst2", 10), ("rte", 10), ("rte", 15)]
