"""One notion of a run's state (pipeline.run_state): done over the selected stages only,
running while a driver holds a stage lock, interrupted, failed, never run; the wall time
of a stopped run stops with it. Runs are written by hand (tests/support/synthetic_run.py) or by
the real engine with plain stage functions (no Ray)."""

from __future__ import annotations

import json
import time

from pipeline.graph import STAGE_NAMES
from pipeline.run_state import read_run_state
from pipeline.status import stage_rows
from storage.stage_lock import StageLock
from tests.support.synthetic_run import write_run
from tests.unit.test_engine import FakeStages, config_file, run  # noqa: F401  (fixture)

DATA_STAGES = ["ingest", "tokenizer", "dataset", "pretrain"]


def stage_dir(workdir, stage):
    (directory,) = [p for p in (workdir / stage).iterdir() if p.is_dir()]
    return directory


def hold_lock(workdir, stage) -> StageLock:
    """The stage lock a driver holds while it writes the stage (storage.local_store.lock_path)."""
    directory = stage_dir(workdir, stage)
    lock = StageLock(directory.parent / f".{directory.name}.lock", what=stage)
    lock.acquire()
    return lock


def test_a_run_that_finished_its_selection_is_done_and_names_what_it_left_out(tmp_path):
    state = read_run_state(write_run(tmp_path / "only", stop_before="finetune", selected=DATA_STAGES))
    assert state.state == "done"
    assert state.not_selected == ("finetune", "evaluate", "report")
    assert state.describe() == "done (finetune, evaluate, report not selected)"
    assert [s.state for s in state.stages] == ["done"] * 4 + ["not selected"] * 3
    assert state.wall_seconds(now=time.time() + 3600) == 4.0  # stopped: it does not grow
    full = read_run_state(write_run(tmp_path / "full"))
    assert (full.state, full.describe(), full.wall_seconds()) == ("done", "done", 7.0)


def test_without_a_recorded_selection_every_stage_counts(tmp_path):
    # A run from before pipeline.json recorded "selected" (or a plain full run stopped early).
    state = read_run_state(write_run(tmp_path / "old", stop_before="finetune"))
    assert state.state == "interrupted" and state.selected == tuple(STAGE_NAMES)


def test_a_live_lock_holder_makes_the_run_running_and_its_stage_running(tmp_path):
    workdir = write_run(tmp_path / "live", stop_before="finetune", run_started=time.time() - 50)
    (stage_dir(workdir, "pretrain") / "manifest.json").unlink()  # pretrain is being written
    assert read_run_state(workdir).state == "interrupted"  # nobody writes it
    lock = hold_lock(workdir, "pretrain")
    try:
        state = read_run_state(workdir)
        assert state.state == "running" and state.describe() == "running (pretrain)"
        assert state.stage("pretrain").holder["pid"] == lock.me["pid"]
        assert 50 <= state.wall_seconds() < 50 + 3600  # since the run started, growing
        assert {r["stage"]: r["state"] for r in stage_rows(workdir)}["pretrain"] == "running"
    finally:
        lock.release()
    assert read_run_state(workdir).state == "interrupted"  # the holder went away


def test_failed_and_never_run(tmp_path):
    failed = read_run_state(write_run(tmp_path / "failed", fail="pretrain"))
    assert failed.state == "failed" and failed.describe() == "failed (pretrain)"
    assert failed.wall_seconds() == 3.0
    assert read_run_state(tmp_path / "nothing-here").state == "never run"
    # pipeline.json written, then the driver stopped before any stage began.
    started = write_run(tmp_path / "started", stop_before="ingest")
    assert read_run_state(started).state == "never run"


def test_a_rerun_of_a_failed_stage_is_running_while_it_holds_the_lock(tmp_path):
    workdir = write_run(tmp_path / "retry", fail="dataset")
    lock = hold_lock(workdir, "dataset")
    try:
        assert read_run_state(workdir).state == "running"
    finally:
        lock.release()
    assert read_run_state(workdir).state == "failed"


def test_the_engine_records_the_selection_and_status_says_running_during_a_stage(config_file):
    seen = {}

    class Watching(FakeStages):
        """Reads the run's state from inside its dataset stage, as `pretrain status` would."""

        def __call__(self, spec):
            inner = super().__call__(spec)

            def stage(ctx):
                if spec.name == "dataset":
                    workdir = ctx.experiment.resolved_workdir
                    seen["run"] = read_run_state(workdir).state
                    seen["stage"] = {r["stage"]: r["state"] for r in stage_rows(workdir)}["dataset"]
                return inner(ctx)

            return stage

    run(config_file, Watching(), only=("ingest", "tokenizer", "dataset"))
    assert seen == {"run": "running", "stage": "running"}
    workdir = config_file.parent / "work"
    assert json.loads((workdir / "pipeline.json").read_text())["selected"] == ["ingest", "tokenizer", "dataset"]
    state = read_run_state(workdir)
    assert state.state == "done" and state.not_selected == ("pretrain", "finetune", "evaluate", "report")
    run(config_file, FakeStages(), from_stage="pretrain")  # the rest: now every stage is done
    assert read_run_state(workdir).describe() == "done"
