"""`<workdir>/latest/<stage>` after `run_pipeline` with plain stage functions (no Ray):
a relative link to each stage's folder of the last run, following a changed config, into
a separate store as well, and a text file where no link can be made. `latest/` is no
stage: status, verify and the run discovery read the run as before."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from pipeline.graph import STAGE_NAMES
from pipeline.latest_links import can_symlink, write_pointer
from pipeline.run_discovery import find_run_dirs
from pipeline.status import stage_rows
from pipeline.verify import verify_run
from tests.unit.test_engine import FakeStages, config_file, run  # noqa: F401 (config_file: a fixture)


def latest(workdir: Path, stage: str) -> Path:
    return (workdir / "latest" / stage).resolve()


def test_latest_points_at_every_stage_of_the_last_run(config_file, tmp_path):
    workdir = tmp_path / "work"
    run(config_file, FakeStages())
    index = json.loads((workdir / "pipeline.json").read_text())
    for stage in STAGE_NAMES:
        link = workdir / "latest" / stage
        assert link.is_symlink() and not os.path.isabs(os.readlink(link))
        assert latest(workdir, stage) == (workdir / stage / index["stages"][stage]).resolve()
        assert (link / "out.txt").read_text().startswith(stage)
    before = {stage: latest(workdir, stage) for stage in STAGE_NAMES}
    run(config_file, FakeStages(), ["pretrain.lr=0.002"])
    assert latest(workdir, "pretrain") != before["pretrain"] and latest(workdir, "tokenizer") == before["tokenizer"]
    # A workdir moved as a whole keeps its links.
    moved = tmp_path / "moved"
    shutil.move(workdir, moved)
    assert (moved / "latest" / "pretrain" / "out.txt").is_file()
    # latest/ is no stage: the run still reads as one run, every stage done and intact.
    assert [row["state"] for row in stage_rows(moved)] == ["done"] * len(STAGE_NAMES)
    assert verify_run(moved) == 0
    assert find_run_dirs(tmp_path) == [moved]


def test_latest_of_a_run_with_a_separate_store_points_into_it(config_file, tmp_path):
    run(config_file, FakeStages(), [f"store={tmp_path / 'shared'}"])
    index = json.loads((tmp_path / "work" / "pipeline.json").read_text())
    assert latest(tmp_path / "work", "dataset") == (tmp_path / "shared" / "dataset" / index["stages"]["dataset"]).resolve()


def test_without_symlinks_a_text_file_holds_the_path(tmp_path):
    assert can_symlink(tmp_path) and not list(tmp_path.iterdir())  # the probe leaves nothing
    write_pointer(tmp_path / "pretrain", "../pretrain/abc", symlink=False)
    assert (tmp_path / "pretrain").read_text() == "../pretrain/abc\n"
    write_pointer(tmp_path / "pretrain", "../pretrain/def")  # replaced, now by a link
    assert os.readlink(tmp_path / "pretrain") == "../pretrain/def"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pretrain"]  # no staging file left
