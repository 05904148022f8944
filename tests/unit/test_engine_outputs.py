"""Finished outputs are checked before reuse: a file of another size (always) or other
bytes (`verify`) makes the stage stale, names the file, and the rerun rebuilds it."""

from __future__ import annotations

import json
from pathlib import Path

from cluster.cli import main
from pipeline.config import load_config
from pipeline.fingerprint import compute_all
from pipeline.planner import Selection, plan
from storage.local_store import FAILURE, LocalArtifactStore, check_files
from tests.unit.test_engine import FakeStages, config_file, run  # noqa: F401  (fixture)


def stage_dir(config_file: Path, stage: str) -> Path:
    cfg = load_config(config_file)
    return LocalArtifactStore(cfg.resolved_workdir).stage_dir(stage, compute_all(cfg)[stage][0])


def flip_bytes(path: Path, offset: int = 0, count: int = 4) -> None:
    data = bytearray(path.read_bytes())
    for i in range(offset, min(offset + count, len(data))):
        data[i] ^= 0xFF
    path.write_bytes(bytes(data))


def test_a_truncated_output_makes_its_stage_stale_and_names_the_file(config_file):
    run(config_file, FakeStages())
    out = stage_dir(config_file, "dataset") / "out.txt"
    out.write_text(out.read_text()[:3])
    decisions = {d.stage: d for d in plan(load_config(config_file))}
    assert decisions["dataset"].action == "run"
    assert "damaged output: out.txt is 3 bytes, the manifest says" in decisions["dataset"].reason
    assert "--force dataset" in decisions["dataset"].reason
    assert decisions["pretrain"].action == "cached"  # same fingerprint: the rebuilt bytes are the same


def test_the_rerun_rebuilds_a_damaged_stage_and_nothing_downstream(config_file):
    stages = FakeStages()
    run(config_file, stages)
    (stage_dir(config_file, "tokenizer") / "out.txt").unlink()
    stages.calls.clear()
    run(config_file, stages)
    assert stages.calls == ["tokenizer"]
    assert (stage_dir(config_file, "tokenizer") / "out.txt").is_file()
    assert {d.action for d in plan(load_config(config_file))} == {"cached"}


def test_flipped_bytes_are_found_by_verify_not_by_a_size_check(config_file, capsys):
    stages = FakeStages()
    run(config_file, stages)
    flip_bytes(stage_dir(config_file, "pretrain") / "out.txt")
    assert {d.action for d in plan(load_config(config_file))} == {"cached"}  # size unchanged
    deep = {d.stage: d for d in plan(load_config(config_file), deep=True)}
    assert deep["pretrain"].action == "run" and "other bytes" in deep["pretrain"].reason

    workdir = load_config(config_file).resolved_workdir
    assert main(["verify", str(workdir)]) == 1
    out = capsys.readouterr().out
    assert "[pretrain] damaged:" in out and "out.txt has other bytes" in out
    assert "--verify" in out and "DAMAGED (1 files)" in out

    stages.calls.clear()
    run(config_file, stages, verify=True)
    assert stages.calls == ["pretrain"]
    assert main(["verify", str(workdir)]) == 0


def test_a_damaged_stage_outside_the_selection_blocks_its_readers_with_the_reason(config_file):
    run(config_file, FakeStages())
    (stage_dir(config_file, "dataset") / "out.txt").write_text("")
    import pytest

    from pipeline.config import ConfigError

    with pytest.raises(ConfigError, match="reads 'dataset', which has a damaged output: out.txt"):
        plan(load_config(config_file), Selection(only=("pretrain",), force=("pretrain",)))


def test_status_shows_a_damaged_stage(config_file, capsys):
    run(config_file, FakeStages())
    (stage_dir(config_file, "ingest") / "out.txt").unlink()
    assert main(["status", str(load_config(config_file).resolved_workdir)]) == 0
    line = next(l for l in capsys.readouterr().out.splitlines() if l.startswith("ingest"))
    assert "damaged" in line


def test_check_files_names_missing_resized_and_changed_files(tmp_path):
    for name in ("a", "b", "c"):
        (tmp_path / name).write_text("0123456789")
    from storage.local_store import inventory

    files = inventory(tmp_path)
    (tmp_path / "a").unlink()
    (tmp_path / "b").write_text("01234")
    flip_bytes(tmp_path / "c")
    assert [str(d) for d in check_files(tmp_path, files)] == [
        "a is missing", "b is 5 bytes, the manifest says 10"]
    assert [d.path for d in check_files(tmp_path, files, deep=True)] == ["a", "b", "c"]


def test_a_failure_record_never_stands_beside_a_manifest(config_file):
    stages = FakeStages(fail={"tokenizer": RuntimeError("boom")})
    import pytest

    from pipeline.runner import StageFailed

    with pytest.raises(StageFailed):
        run(config_file, stages)
    assert (stage_dir(config_file, "tokenizer") / FAILURE).is_file()
    run(config_file, FakeStages())
    directory = stage_dir(config_file, "tokenizer")
    assert (directory / "manifest.json").is_file() and not (directory / FAILURE).exists()
    assert json.loads((directory / "manifest.json").read_text())["stage"] == "tokenizer"
