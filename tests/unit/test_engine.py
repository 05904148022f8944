"""The engine with plain stage functions: skipping, staleness, force, failure, resume."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.config import ConfigError, load_config
from pipeline.graph import STAGE_NAMES
from pipeline.planner import Selection, plan
from pipeline.runner import StageFailed, run_pipeline
from pipeline.status import stage_rows

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    (tmp_path / "data").mkdir()
    path = tmp_path / "experiment.yaml"
    path.write_text(
        f"name: unit\nworkdir: {tmp_path / 'work'}\ndata_dir: {tmp_path / 'data'}\n"
        "ingest:\n  sources:\n    - path: corpus/*.txt\n"
    )
    return path


class FakeStages:
    """Stage functions that record their calls and write one file each."""

    def __init__(self, fail: dict[str, BaseException] | None = None):
        self.calls: list[str] = []
        self.fail = fail or {}
        self.found_partial: dict[str, bool] = {}

    def __call__(self, spec):
        def stage(ctx):
            self.calls.append(spec.name)
            self.found_partial[spec.name] = (ctx.output_dir / "out.txt").exists()
            (ctx.output_dir / "out.txt").write_text(f"{spec.name} {ctx.fingerprint}")
            for name, directory in ctx.inputs.items():
                assert (directory / "manifest.json").is_file(), f"{name} unfinished"
            if spec.name in self.fail:
                raise self.fail[spec.name]
            return {"value": len(self.calls)}

        return stage


def run(config_file: Path, stages: FakeStages, overrides=(), *, verify: bool = False,
        wait_lock: bool = False, echo=lambda *_: None, **selection):
    cfg = load_config(config_file, list(overrides))
    return run_pipeline(cfg, Selection(**selection), echo=echo, load_stage=stages, use_ray=False,
                        verify=verify, wait_lock=wait_lock)


def test_first_run_runs_everything_then_all_cached(config_file):
    stages = FakeStages()
    run(config_file, stages)
    assert stages.calls == list(STAGE_NAMES)
    result = run(config_file, stages)
    assert stages.calls == list(STAGE_NAMES)  # nothing ran again
    assert {d.action for d in result.decisions} == {"cached"}


def test_changing_a_key_reruns_that_stage_and_downstream_only(config_file):
    stages = FakeStages()
    run(config_file, stages)
    stages.calls.clear()
    cfg = load_config(config_file, ["pretrain.lr=0.002"])
    reasons = {d.stage: d.reason for d in plan(cfg) if d.action == "run"}
    assert set(reasons) == {"pretrain", "finetune", "evaluate", "report"}
    assert "pretrain.lr 0.001 -> 0.002" in reasons["pretrain"]
    assert "input 'pretrain' changed" in reasons["finetune"]
    run(config_file, stages, ["pretrain.lr=0.002"])
    assert stages.calls == ["pretrain", "finetune", "evaluate", "report"]


def test_editing_the_deepspeed_json_a_config_names_reruns_pretrain(config_file, tmp_path):
    """The path in pretrain.deepspeed_config does not change when the file is edited;
    its contents are part of the fingerprint all the same."""
    ds_json = tmp_path / "ds.json"
    ds_json.write_text('{"zero_optimization": {"reduce_bucket_size": 1000000}}')
    override = [f"pretrain.deepspeed_config={ds_json}"]
    stages = FakeStages()
    run(config_file, stages, override)
    stages.calls.clear()
    run(config_file, stages, override)
    assert stages.calls == []  # same file: cached
    ds_json.write_text('{"zero_optimization": {"reduce_bucket_size": 2000000}}')
    reasons = {d.stage: d.reason for d in plan(load_config(config_file, override)) if d.action == "run"}
    assert set(reasons) == {"pretrain", "finetune", "evaluate", "report"}
    assert "input file pretrain.deepspeed_config changed" in reasons["pretrain"]


def test_describe_change_names_changed_added_and_removed_keys():
    from pipeline.planner import describe_change

    old = {"stage": "ingest", "config": {"min_chars": 20, "gone": 1, "nested": {"a": 1}},
           "experiment": {"seed": 0}, "code_version": "1", "inputs": {}}
    new = {"stage": "ingest", "config": {"min_chars": 50, "nested": {"a": 1, "b": {"x": 2}}},
           "experiment": {"seed": 0}, "code_version": "2", "inputs": {}}
    assert describe_change(old, new) == (
        "ingest.min_chars 20 -> 50, new config keys ingest.nested.b, "
        "config keys no longer used ingest.gone, code version 1 -> 2")


def test_seed_is_part_of_the_fingerprint_of_stages_that_read_it(config_file):
    stages = FakeStages()
    run(config_file, stages)
    stages.calls.clear()
    run(config_file, stages, ["seed=7"])
    assert "ingest" not in stages.calls and stages.calls[0] == "tokenizer"


def test_force_reruns_the_stage_and_its_downstream(config_file):
    stages = FakeStages()
    run(config_file, stages)
    stages.calls.clear()
    run(config_file, stages, force=("dataset",))
    assert stages.calls == ["dataset", "pretrain", "finetune", "evaluate", "report"]
    # A forced resumable stage starts empty: it must not "resume" from its finished output.
    assert stages.found_partial["pretrain"] is False
    stages.calls.clear()
    run(config_file, stages, only=("tokenizer",), force=("*",))
    assert stages.calls == ["tokenizer"]


def test_only_and_from_select_stages(config_file):
    stages = FakeStages()
    run(config_file, stages, only=("ingest",))
    assert stages.calls == ["ingest"]
    with pytest.raises(ConfigError, match="reads 'tokenizer'.*--from tokenizer"):
        run(config_file, stages, only=("dataset",))
    run(config_file, stages, from_stage="tokenizer")
    assert stages.calls == list(STAGE_NAMES)


def test_a_failing_stage_leaves_no_manifest_and_names_itself(config_file):
    stages = FakeStages(fail={"dataset": ValueError("bad shard 3")})
    with pytest.raises(StageFailed, match="stage 'dataset' failed: ValueError: bad shard 3"):
        run(config_file, stages)
    cfg = load_config(config_file)
    rows = {r["stage"]: r for r in stage_rows(cfg.resolved_workdir)}
    assert rows["tokenizer"]["state"] == "done"
    assert rows["dataset"]["state"] == "failed" and "bad shard 3" in rows["dataset"]["metrics"]["error"]
    assert rows["pretrain"]["state"] == "not run"
    assert not list(cfg.resolved_workdir.glob("dataset/*/manifest.json"))
    dataset = next(d for d in plan(cfg) if d.stage == "dataset")
    assert dataset.action == "run" and "failed last time" in dataset.reason
    # Fixed: the rerun skips what finished and completes the rest.
    stages.fail.clear()
    stages.calls.clear()
    run(config_file, stages)
    assert stages.calls == ["dataset", "pretrain", "finetune", "evaluate", "report"]


def test_interrupt_keeps_partial_output_only_for_resuming_stages(config_file):
    stages = FakeStages(fail={"pretrain": KeyboardInterrupt()})
    with pytest.raises(KeyboardInterrupt):
        run(config_file, stages)
    cfg = load_config(config_file)
    pretrain = next(d for d in plan(cfg) if d.stage == "pretrain")
    assert "interrupted" in pretrain.reason and "resumes" in pretrain.reason
    partial = cfg.resolved_workdir / "pretrain" / pretrain.fingerprint / "out.txt"
    assert partial.is_file()  # checkpoints of a resumable stage survive
    stages.fail.clear()
    run(config_file, stages)
    assert stages.found_partial["pretrain"] is True


def interrupted_inside_an_import() -> RuntimeError:
    """What a SIGTERM that lands while an import builds a class raises in Python 3.11."""
    try:
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as interrupt:
            raise RuntimeError("Error calling __set_name__ on 'Field' instance 'created_handles' "
                               "in 'IOHandles'") from interrupt
    except RuntimeError as wrapped:
        return wrapped


def test_an_interrupt_wrapped_in_another_error_is_a_stop_not_a_failure(config_file):
    stages = FakeStages(fail={"pretrain": interrupted_inside_an_import()})
    with pytest.raises(KeyboardInterrupt):
        run(config_file, stages)
    cfg = load_config(config_file)
    pretrain = next(d for d in plan(cfg) if d.stage == "pretrain")
    assert "interrupted" in pretrain.reason and not list(cfg.resolved_workdir.glob("pretrain/*/failure.json"))


def test_a_non_resuming_stage_starts_from_an_empty_directory(config_file):
    stages = FakeStages(fail={"tokenizer": KeyboardInterrupt()})
    with pytest.raises(KeyboardInterrupt):
        run(config_file, stages)
    stages.fail.clear()
    run(config_file, stages)
    assert stages.found_partial["tokenizer"] is False


def test_manifest_records_files_metrics_and_identity(config_file):
    stages = FakeStages()
    run(config_file, stages)
    cfg = load_config(config_file)
    manifest_path = next(cfg.resolved_workdir.glob("tokenizer/*/manifest.json"))
    manifest = json.loads(manifest_path.read_text())
    assert manifest["stage"] == "tokenizer" and manifest["metrics"] == {"value": 2}
    assert manifest["inputs"]["ingest"] == manifest["identity"]["inputs"]["ingest"]
    (file_entry,) = manifest["files"]
    assert file_entry["path"] == "out.txt" and len(file_entry["sha256"]) == 64
    assert manifest["libraries"]["pydantic"] != "not installed"


def test_missing_data_dir_stops_before_any_work(tmp_path):
    path = tmp_path / "experiment.yaml"
    path.write_text(f"name: unit\nworkdir: {tmp_path / 'work'}\ndata_dir: {tmp_path / 'nowhere'}\n"
                    "ingest:\n  sources:\n    - path: corpus/*.txt\n")
    stages = FakeStages()
    with pytest.raises(ConfigError, match="does not exist.*set DATA_DIR"):
        run(path, stages)
    assert stages.calls == []


def test_plan_and_status_do_not_import_torch_or_ray(config_file):
    stages = FakeStages()
    run(config_file, stages)
    code = (
        "import sys\nfrom cluster.cli import main\n"
        f"assert main(['plan', {str(config_file)!r}]) == 0\n"
        f"assert main(['status', {str(config_file.parent / 'work')!r}]) == 0\n"
        "heavy = {'torch', 'ray', 'deepspeed', 'tokenizers', 'pyarrow'} & set(sys.modules)\n"
        "assert not heavy, heavy\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "cached" in out.stdout and "done" in out.stdout


def test_status_of_a_directory_that_is_not_a_run(tmp_path):
    from cluster.cli import main

    assert main(["status", str(tmp_path)]) == 2
