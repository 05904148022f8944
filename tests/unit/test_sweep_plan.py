"""A sweep without Ray: `pretrain run` refuses a config with a sweep section, `pretrain
plan` / `pretrain sweep --plan` show which stage outputs the points share, the `store`
key (stage outputs outside the workdir, shared by runs that name one store), and
`run_sweep` on points that are all finished."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from cluster.cli import main
from pipeline.config import ConfigError, load_config
from pipeline.graph import STAGE_NAMES
from pipeline.planner import Decision, Selection
from views.run_source import load_run_source
from pipeline.runner import run_pipeline
from pipeline.status import stage_rows
from sweep.expand import Sweep, SweepPoint, expand_sweep
from sweep.run import format_plan, run_sweep, stage_uses
from pipeline.verify import verify_run

REPO_ROOT = Path(__file__).resolve().parents[2]
UPSTREAM = ("ingest", "tokenizer", "dataset")
LR_AXIS = "sweep:\n  grid:\n    pretrain.lr: [1.0e-3, 3.0e-3]\n"


class FakeStages:
    """Stage functions that record their calls and write one file each (as in test_engine)."""

    def __init__(self):
        self.calls: list[str] = []

    def __call__(self, spec):
        def stage(ctx):
            self.calls.append(spec.name)
            (ctx.output_dir / "out.txt").write_text(f"{spec.name} {ctx.fingerprint}")
            return {"value": len(self.calls)}

        return stage


@pytest.fixture
def engine_config(tmp_path: Path):
    """engine_config(extra YAML) -> a config whose stages run as plain functions."""
    (tmp_path / "data").mkdir(exist_ok=True)

    def write(extra: str = "", name: str = "unit.yaml") -> Path:
        path = tmp_path / name
        path.write_text(f"name: unit\nworkdir: {tmp_path / 'root'}\ndata_dir: {tmp_path / 'data'}\n"
                        "ingest:\n  sources:\n    - path: corpus/*.txt\n" + extra)
        return path

    return write


# --- pretrain run refuses a sweep -------------------------------------------------------

def test_run_refuses_a_config_with_a_sweep_section(engine_config, tmp_path, capsys):
    config = engine_config(LR_AXIS)
    with pytest.raises(ConfigError, match=r"has a sweep: section: run it with `pretrain sweep CONFIG`"):
        run_pipeline(load_config(config), load_stage=FakeStages(), use_ray=False)
    assert main(["run", str(config)]) == 2
    err = capsys.readouterr().err
    assert "`pretrain sweep CONFIG`" in err and "-o sweep=" in err
    assert not (tmp_path / "root").exists()  # refused before writing anything
    # The base config alone still runs.
    stages = FakeStages()
    run_pipeline(load_config(config, ["sweep="]), load_stage=stages, use_ray=False, echo=lambda *_: None)
    assert stages.calls == list(STAGE_NAMES)


# --- plan ----------------------------------------------------------------------------

@pytest.fixture
def gpt_tiny_sweep(tmp_path, data_dir) -> Path:
    """configs/gpt-tiny.yaml with a 2-point lr axis, its workdir in tmp_path."""
    path = tmp_path / "gpt-tiny-sweep.yaml"
    path.write_text((REPO_ROOT / "configs" / "gpt-tiny.yaml").read_text()
                    + f"workdir: {tmp_path / 'root'}\ndata_dir: {data_dir}\n" + LR_AXIS)
    return path


def plan_rows(output: str) -> list[list[str]]:
    """The rows of the stage table: [stage, fingerprint, read by, decision]."""
    rows = []
    for line in output.splitlines():
        cells = [c for c in line.split("  ") if c.strip()]
        if cells and cells[0].strip() in STAGE_NAMES:
            rows.append([c.strip() for c in cells])
    return rows


def test_plan_of_a_sweep_shows_shared_stages_once_and_a_row_per_point_for_the_rest(gpt_tiny_sweep, tmp_path, capsys):
    assert main(["plan", str(gpt_tiny_sweep)]) == 0
    output = capsys.readouterr().out
    assert f"2 points under {tmp_path / 'root'}, stage outputs shared in {tmp_path / 'root' / 'store'}" in output
    rows = plan_rows(output)
    assert [r[0] for r in rows] == ["ingest", "tokenizer", "dataset", "pretrain", "pretrain",
                                    "finetune", "finetune", "evaluate", "evaluate", "report", "report"]
    for row in rows[:3]:
        assert row[2:] == ["all 2 points", "runs once, reused by the other 1"]
    assert [r[2:] for r in rows[3:5]] == [["lr-0.001", "runs"], ["lr-0.003", "runs"]]
    assert rows[3][1] != rows[4][1]
    assert "11 stage outputs for 2 points (14 if each point ran alone)" in output
    assert not (tmp_path / "root").exists()  # a plan writes nothing: no folder, no hash cache


def test_sweep_plan_writes_nothing_and_reads_each_input_file_once(gpt_tiny_sweep, tmp_path, capsys,
                                                                  monkeypatch):
    from pipeline.input_files import InputHasher

    read: list[str] = []  # every file hashed (read), spied on: the hashing itself is real
    hash_all = InputHasher._hash_all

    def spy(self, to_hash):
        read.extend(path for _, path, _, _ in to_hash)
        return hash_all(self, to_hash)

    monkeypatch.setattr(InputHasher, "_hash_all", spy)
    assert main(["sweep", str(gpt_tiny_sweep), "--plan", "-o", "seed=[0,1,2]"]) == 0
    assert "6 points" in capsys.readouterr().out
    assert read and len(read) == len(set(read))  # not once per point
    assert not (tmp_path / "root").exists()


@pytest.mark.parametrize("override, message", [
    ("pretrain.lr=[1e-3", r"^error: -o 'pretrain\.lr=\[1e-3': not valid YAML"),
    ("pretrain.lr=[1e-3, 0.001]",
     r"^error: .*sweep points pretrain\.lr=1e-3 and pretrain\.lr=0\.001 are the same experiment"),
])
def test_sweep_mistakes_are_one_error_line_and_exit_2(gpt_tiny_sweep, tmp_path, capsys, override, message):
    for extra in ([], ["--plan"]):
        assert main(["sweep", str(gpt_tiny_sweep), "-o", override, *extra]) == 2
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and re.match(message, err), err
    assert not (tmp_path / "root").exists()


def test_sweep_plan_with_an_o_axis_shares_pretrain_between_the_points_that_agree(gpt_tiny_sweep, capsys):
    assert main(["sweep", str(gpt_tiny_sweep), "--plan", "-o", "finetune.tasks=[[sst2],[cola]]"]) == 0
    rows = plan_rows(capsys.readouterr().out)
    by_stage = {}
    for row in rows:
        by_stage.setdefault(row[0], []).append(row[2:])
    assert by_stage["dataset"] == [["all 4 points", "runs once, reused by the other 3"]]
    assert by_stage["pretrain"] == [
        ["2 points: lr-0.001_tasks-sst2, lr-0.001_tasks-cola", "runs once, reused by the other 1"],
        ["2 points: lr-0.003_tasks-sst2, lr-0.003_tasks-cola", "runs once, reused by the other 1"]]
    assert len(by_stage["finetune"]) == 4 and all(r[1] == "runs" for r in by_stage["finetune"])


def hand_made_sweep(*names: str) -> Sweep:
    # stage_uses and format_plan read the points' names only.
    return Sweep("s", Path("/nowhere"), "s.yaml", [SweepPoint(n, {}, config=None) for n in names], None)


def decision(stage: str, fingerprint: str, action: str) -> Decision:
    return Decision(stage, fingerprint, action, "hand-made")


def test_stage_uses_group_points_by_output_in_graph_order_and_format_plan_says_who_shares():
    sweep = hand_made_sweep("a", "b", "c")
    decisions = {
        "a": [decision("pretrain", "p1", "run"), decision("ingest", "i1", "cached"),
              decision("tokenizer", "t1", "run"), decision("finetune", "f1", "run")],
        "b": [decision("ingest", "i1", "cached"), decision("tokenizer", "t1", "run"),
              decision("pretrain", "p1", "run"), decision("finetune", "f2", "run")],
        "c": [decision("ingest", "i1", "cached"), decision("tokenizer", "t1", "run"),
              decision("pretrain", "p2", "cached"), decision("finetune", "f3", "missing")],
    }
    uses = stage_uses(sweep, decisions)
    assert [(u.stage, u.fingerprint, u.points, u.action) for u in uses] == [
        ("ingest", "i1", ("a", "b", "c"), "cached"),
        ("tokenizer", "t1", ("a", "b", "c"), "run"),
        ("pretrain", "p1", ("a", "b"), "run"),
        ("pretrain", "p2", ("c",), "cached"),
        ("finetune", "f1", ("a",), "run"),
        ("finetune", "f2", ("b",), "run"),
        ("finetune", "f3", ("c",), "missing"),
    ]
    assert format_plan(sweep, uses) == [
        ["ingest", "i1", "all 3 points", "cached, reused by each"],
        ["tokenizer", "t1", "all 3 points", "runs once, reused by the other 2"],
        ["pretrain", "p1", "2 points: a, b", "runs once, reused by the other 1"],
        ["pretrain", "p2", "c", "cached"],
        ["finetune", "f1", "a", "runs"],
        ["finetune", "f2", "b", "runs"],
        ["finetune", "f3", "c", "not selected"],
    ]


def test_a_one_point_sweep_names_its_point_rather_than_all_1_points():
    sweep = hand_made_sweep("only")
    uses = stage_uses(sweep, {"only": [decision("ingest", "i1", "run")]})
    assert format_plan(sweep, uses) == [["ingest", "i1", "only", "runs"]]


# --- the store key -----------------------------------------------------------------------

def test_a_run_with_a_store_keeps_its_outputs_there_and_status_verify_and_reports_find_them(engine_config, tmp_path):
    store = tmp_path / "shared-store"
    config = engine_config(f"store: {store}\n")
    first = tmp_path / "root"
    run_pipeline(load_config(config), load_stage=FakeStages(), use_ray=False, echo=lambda *_: None)

    index = json.loads((first / "pipeline.json").read_text())
    assert index["store"] == os.path.relpath(store, first) == "../shared-store"
    for stage, fingerprint in index["stages"].items():
        assert (store / stage / fingerprint / "manifest.json").is_file()
        assert not (first / stage).exists()
    assert [r["state"] for r in stage_rows(first)] == ["done"] * len(STAGE_NAMES)
    source = load_run_source(first)
    assert [s.state for s in source.stages] == ["done"] * len(STAGE_NAMES)
    assert all(s.directory.parent.parent == store for s in source.stages)

    lines: list[str] = []
    assert verify_run(first, echo=lines.append) == 0
    damaged = store / "pretrain" / index["stages"]["pretrain"] / "out.txt"
    damaged.write_text("X" * len(damaged.read_text()))  # same size, other bytes
    lines.clear()
    assert verify_run(first, echo=lines.append) == 1
    assert any(f"[pretrain] damaged: {damaged}" in line for line in lines)

    # A second run naming the same store reuses the stages it shares with the first.
    second = tmp_path / "second"
    stages = FakeStages()
    result = run_pipeline(load_config(config, [f"workdir={second}", "pretrain.lr=0.002", "pretrain.max_steps=3"]),
                          load_stage=stages, use_ray=False, echo=lambda *_: None)
    assert {d.stage: d.action for d in result.decisions if d.stage in UPSTREAM} == dict.fromkeys(UPSTREAM, "cached")
    assert stages.calls == ["pretrain", "finetune", "evaluate", "report"]
    assert json.loads((second / "pipeline.json").read_text())["store"] == "../shared-store"
    assert [r["state"] for r in stage_rows(second)] == ["done"] * len(STAGE_NAMES)


def test_a_run_without_a_store_records_none(engine_config, tmp_path):
    run_pipeline(load_config(engine_config()), load_stage=FakeStages(), use_ray=False, echo=lambda *_: None)
    index = json.loads((tmp_path / "root" / "pipeline.json").read_text())
    assert "store" not in index
    assert (tmp_path / "root" / "ingest" / index["stages"]["ingest"] / "manifest.json").is_file()


# --- run_sweep without Ray -------------------------------------------------------------

def test_run_sweep_of_finished_points_skips_them_all_without_ray_or_children(engine_config, tmp_path, monkeypatch):
    import sweep.children as sweep_children
    import sweep.run as sweep_run

    sweep = expand_sweep(engine_config(LR_AXIS))
    stages = FakeStages()
    for point in sweep.points:  # every stage of every point, into the shared store
        run_pipeline(point.config, load_stage=stages, use_ray=False, sweep=sweep.name, echo=lambda *_: None)
    assert stages.calls.count("ingest") == 1 and stages.calls.count("pretrain") == 2

    def refuse(*args, **kwargs):
        raise AssertionError("a sweep of finished points must start neither Ray nor a child")

    monkeypatch.setattr(sweep_run.SweepRay, "__enter__", refuse)
    monkeypatch.setattr(sweep_children.subprocess, "Popen", refuse)
    lines: list[str] = []
    assert run_sweep(sweep, echo=lines.append) == 0
    for point in sweep.points:
        assert f"[{point.name}] finished: every selected stage cached, skipped" in lines
    index = json.loads((sweep.root / "sweep.json").read_text())
    assert index["name"] == "unit" and index["store"] == "store"
    assert [(p["name"], p["state"], p["workdir"], p["overrides"]) for p in index["points"]] == [
        ("lr-0.001", "done", "lr-0.001", {"pretrain.lr": 0.001}),
        ("lr-0.003", "done", "lr-0.003", {"pretrain.lr": 0.003})]
    assert "lr-0.003" in (sweep.root / "sweep.md").read_text()  # the summary is still written


def test_run_sweep_has_no_force(engine_config, tmp_path):
    sweep = expand_sweep(engine_config(LR_AXIS))
    with pytest.raises(ConfigError, match=r"pretrain sweep has no --force.*pretrain run CONFIG -o"):
        run_sweep(sweep, selection=Selection(force=("pretrain",)), echo=lambda *_: None)
    assert not sweep.root.exists()
