"""Finding every run under a root: sweep points beside their shared store, plain runs,
nested folders; never inside a run, a sweep's store, a hidden folder or too deep."""

from __future__ import annotations

import json

import pytest

from pipeline.config import ConfigError
from pipeline.run_discovery import MAX_DEPTH, find_run_dirs, is_runs_root
from tests.support.synthetic_run import write_run, write_sweep_point


def decoy(directory) -> None:
    """A pipeline.json where no run is: found only if the walk goes where it must not."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "pipeline.json").write_text(json.dumps({"name": "decoy", "stages": {}}))


def test_sweep_points_and_plain_runs_are_found_sorted_and_nothing_inside_them(tmp_path):
    sweep = tmp_path / "sweeps" / "lr"
    points = [write_sweep_point(sweep, name, name=name, lr=lr) for name, lr in (("b", 0.002), ("a", 0.001))]
    plain = write_run(tmp_path / "plain", name="plain")
    decoy(sweep / "store" / "pretrain" / "checkpoints")   # the sweep's shared store
    decoy(plain / "pretrain" / "nested")                  # a run's own stage folder
    decoy(tmp_path / ".trash" / "old")                    # hidden
    decoy(tmp_path / "a" / "b" / "c" / "d" / "too-deep")  # 5 levels down
    assert MAX_DEPTH == 4
    decoy(tmp_path / "x" / "y" / "z" / "deep-enough")     # 4 levels down

    assert find_run_dirs(tmp_path) == sorted([*points, plain, tmp_path / "x" / "y" / "z" / "deep-enough"])
    assert find_run_dirs(sweep) == sorted(points)
    assert find_run_dirs(plain) == [plain]  # a run is its own root


def test_a_root_with_no_run_names_itself_and_what_to_pass(tmp_path):
    (tmp_path / "empty" / "sub").mkdir(parents=True)
    with pytest.raises(ConfigError, match=r"empty is not a run directory and holds none.*sweep's root"):
        find_run_dirs(tmp_path / "empty")
    with pytest.raises(ConfigError, match="missing does not exist"):
        find_run_dirs(tmp_path / "missing")


def test_only_one_folder_that_is_not_a_run_is_a_root(tmp_path):
    run = write_run(tmp_path / "run")
    assert is_runs_root([tmp_path]) and is_runs_root([str(tmp_path)])
    assert not is_runs_root([run])                      # one run: its own report
    assert not is_runs_root([tmp_path, run])            # several: the comparison, as before
    assert not is_runs_root([tmp_path / "missing"])     # the one-run path says it does not exist
