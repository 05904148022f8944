"""The report and the dashboard read a run's state as `status` does (pipeline.run_state
through views.run_source): a finished `--only` run is not "in progress" (the dashboard
would poll it at the live rate forever) and its left-out stages are "not selected", not
"has not started"; a stage without a manifest is running while a driver holds its lock,
else interrupted."""

from __future__ import annotations

from views.run_source import load_run_source
from stages.report.content import problems
from tests.support.synthetic_run import write_run
from tests.unit.test_run_state import DATA_STAGES, hold_lock, stage_dir


def kinds(source) -> dict[str, str]:
    return {p["stage"]: p["kind"] for p in problems(source, source.stages, {})}


def test_a_finished_only_run_is_done_and_names_its_left_out_stages(tmp_path):
    source = load_run_source(write_run(tmp_path / "only", stop_before="finetune", selected=DATA_STAGES))
    assert source.state == "done" and not source.in_progress
    assert {stage: kind for stage, kind in kinds(source).items() if stage not in DATA_STAGES} == {
        "finetune": "not selected", "evaluate": "not selected", "report": "not selected"}


def test_an_unfinished_stage_is_running_under_a_live_lock_and_interrupted_without(tmp_path):
    workdir = write_run(tmp_path / "live", stop_before="finetune")
    (stage_dir(workdir, "pretrain") / "manifest.json").unlink()
    source = load_run_source(workdir)
    assert source.state == "interrupted" and not source.in_progress
    assert kinds(source)["pretrain"] == "interrupted"
    lock = hold_lock(workdir, "pretrain")
    try:
        source = load_run_source(workdir)
        assert source.state == "running" and source.in_progress
        assert kinds(source)["pretrain"] == "running"
    finally:
        lock.release()
