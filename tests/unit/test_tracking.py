"""Tracking writes JSONL always and wandb offline files when asked; wandb errors only warn."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from stages.tracking import MetricsLog, Tracker, open_tracker
from tests.support.wandb_offline import offline_log


def experiment(mode: str):
    wandb = SimpleNamespace(mode=mode, project="pp-tests", entity=None)
    return SimpleNamespace(name="unit", tracking=SimpleNamespace(wandb=wandb))


def test_disabled_writes_jsonl_only(tmp_path):
    tracker = open_tracker(experiment=experiment("disabled"), stage="pretrain",
                           fingerprint="abc123", output_dir=tmp_path)
    tracker.log({"loss": 2.5}, step=1)
    tracker.finish()
    (record,) = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert record["loss"] == 2.5 and record["step"] == 1
    assert not (tmp_path / "wandb").exists()


def test_offline_run_holds_the_logged_metrics(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_SILENT", "true")
    tracker = open_tracker(experiment=experiment("offline"), stage="pretrain",
                           fingerprint="abc123", output_dir=tmp_path, config={"lr": 0.1})
    for step in range(1, 4):
        tracker.log({"loss": 3.0 / step}, step=step)
    tracker.summary({"val_loss": 1.5})
    tracker.finish()
    # The offline protobuf log holds the metric name and the run's tags.
    content = offline_log(tmp_path, [b"loss", b"abc123"])
    assert b"loss" in content and b"abc123" in content


def test_a_failing_wandb_run_only_warns(tmp_path):
    class Broken:
        def log(self, *args, **kwargs):
            raise RuntimeError("network down")

    tracker = Tracker(MetricsLog(tmp_path / "m.jsonl"), Broken())
    with pytest.warns(UserWarning, match="network down"):
        tracker.log({"loss": 1.0}, step=1)
    tracker.log({"loss": 0.5}, step=2)  # no second warning: wandb is off now
    assert len((tmp_path / "m.jsonl").read_text().splitlines()) == 2
