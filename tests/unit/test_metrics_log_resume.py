"""A training run that resumes from the checkpoint at step N first drops the records of
steps after N from metrics.jsonl, so that the file holds each step once."""

from __future__ import annotations

from stages.tracking import MetricsLog


def test_records_after_the_resumed_step_are_dropped_and_others_kept(tmp_path):
    log = MetricsLog(tmp_path / "metrics.jsonl")
    log.log({"stage": "pretrain", "note": "no step: always kept"})
    for step in range(1, 8):  # the first attempt, killed after step 7
        log.log({"step": step, "loss": 10.0 - step})
    log.drop_records_after(5)  # resumed from the checkpoint at step 5
    for step in (6, 7, 8):
        log.log({"step": step, "loss": 1.0})

    records = log.read()
    assert records[0]["note"] == "no step: always kept"
    steps = [r["step"] for r in records if "step" in r]
    assert steps == list(range(1, 9))
    assert [r["loss"] for r in records if r.get("step", 0) >= 5] == [5.0, 1.0, 1.0, 1.0]
    assert not list(tmp_path.glob("*.partial"))


def test_a_fresh_start_drops_every_step_and_a_missing_file_is_fine(tmp_path):
    log = MetricsLog(tmp_path / "metrics.jsonl")
    log.drop_records_after(0)  # no file yet
    assert not log.path.exists()
    log.log({"step": 1, "loss": 3.0})  # an attempt killed before its first checkpoint
    log.drop_records_after(0)
    assert log.read() == []
