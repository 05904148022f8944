"""The table of every run under a root: one row per run with its state and wall time, the
config keys that differ, scores with their baselines; its Markdown and the page's data."""

from __future__ import annotations

import json
import re
import sys
import time

import pytest

import views.scaling as scaling
from cluster.cli import main
from storage.stage_lock import StageLock
from tests.support.synthetic_run import write_run, write_sweep_point
from views.run_source import load_run_source
from views.run_table import build_run_table
from views.run_table_render import format_duration, run_table_html, run_table_markdown
from views.runs_report import render_runs, write_runs_report


HELD: list[StageLock] = []  # stage locks this test holds, as a live driver would


@pytest.fixture(autouse=True)
def release_locks():
    yield
    while HELD:
        HELD.pop().release()


def pretrain_running(workdir, *, locked: bool = True, **kwargs):
    """A run whose pretrain stage has logged steps but has no manifest yet; `locked`: a
    driver (this test) holds the stage's lock, as while it trains."""
    workdir = write_run(workdir, stop_before="finetune", **kwargs)
    (manifest,) = workdir.glob("pretrain/*/manifest.json")
    manifest.unlink()
    if locked:
        lock = StageLock(manifest.parent.parent / f".{manifest.parent.name}.lock", what="pretrain")
        lock.acquire()
        HELD.append(lock)
    return workdir


def root_of_runs(tmp_path):
    """Two sweep points and a failed plain run, one running run: 4 rows."""
    sweep = tmp_path / "lr-sweep"
    write_sweep_point(sweep, "lr-1e-3", sweep="lr-sweep", name="a", pretrain_metrics={"final_loss": 6.5})
    write_sweep_point(sweep, "lr-2e-3", sweep="lr-sweep", name="b", lr=0.002, accuracy=0.6,
                      pretrain_metrics={"final_loss": 6.1})
    write_run(tmp_path / "broken", name="broken", lr=0.004, fail="pretrain")
    pretrain_running(tmp_path / "live", name="live", lr=0.003)
    return tmp_path


def rows_by_run(table):
    return {row["values"]["run"]: row for row in table["rows"]}


def test_one_row_per_run_with_state_wall_time_sweep_and_differing_config(tmp_path):
    before = time.time()
    _, _, table = render_runs(root_of_runs(tmp_path))
    after = time.time()
    rows = rows_by_run(table)
    assert [row["values"]["directory"] for row in table["rows"]] == [
        "broken", "live", "lr-sweep/lr-1e-3", "lr-sweep/lr-2e-3"]
    assert {run: row["values"]["state"] for run, row in rows.items()} == {
        "a": "done", "b": "done", "broken": "failed", "live": "running"}
    assert rows["a"]["values"]["sweep"] == "lr-sweep" and rows["live"]["values"]["sweep"] is None
    # 7 finished stages of 1 s each; the failed run finished 3 before pretrain failed.
    assert rows["a"]["values"]["wall_seconds"] == 7.0 and rows["broken"]["values"]["wall_seconds"] == 3.0
    # Since it started: 100 s before it was written, so 100 s plus at most this test's own time.
    assert 100 - 1e-3 <= rows["live"]["values"]["wall_seconds"] <= 100 + (after - before) + 1e-3
    assert rows["broken"]["error"].startswith("pretrain: RuntimeError: CUDA <out> of memory")

    config_columns = [c["name"] for c in table["columns"] if c["group"] == "config"]
    assert config_columns == ["pretrain.lr"]  # name and workdir differ too, and say nothing
    assert [rows[r]["values"]["config:pretrain.lr"] for r in "ab"] == [0.001, 0.002]


def test_scores_come_with_their_baselines_and_missing_values_stay_missing(tmp_path):
    _, _, table = render_runs(root_of_runs(tmp_path))
    rows, columns = rows_by_run(table), {c["name"]: c for c in table["columns"]}
    assert [rows[r]["values"]["metric:pretrain/final_loss"] for r in ("a", "b", "broken", "live")] == [
        6.5, 6.1, None, None]
    assert columns["pretrain/final_loss"]["lower_is_better"] is True
    assert columns["sst2/accuracy"]["lower_is_better"] is False
    assert rows["b"]["values"]["metric:sst2/accuracy"] == 0.6
    piqa = columns["eval/piqa/acc"]
    assert piqa["group"] == "evaluate" and piqa["baseline"] == 0.5
    assert rows["a"]["contexts"][piqa["key"]] == {"baseline": 0.5, "verdict": "chance", "label": "≈ chance"}
    assert piqa["key"] not in rows["live"]["contexts"]


def test_states_come_from_locks_and_the_selection_never_from_the_clock(tmp_path):
    write_run(tmp_path / "done", name="done")
    pretrain_running(tmp_path / "live", name="live")
    pretrain_running(tmp_path / "stopped", name="stopped", locked=False)  # killed mid-pretrain
    write_run(tmp_path / "only", name="only", stop_before="finetune",
              selected=["ingest", "tokenizer", "dataset", "pretrain"])  # --only ... --only pretrain
    write_run(tmp_path / "failed", name="failed", fail="dataset")
    _, markdown, table = render_runs(tmp_path)
    rows = rows_by_run(table)
    assert {run: row["values"]["state"] for run, row in rows.items()} == {
        "done": "done", "live": "running", "stopped": "interrupted", "only": "done", "failed": "failed"}
    assert rows["only"]["not_selected"] == ["finetune", "evaluate", "report"]
    assert rows["only"]["stages"]["finetune"] == "not selected" and rows["live"]["stages"]["pretrain"] == "running"
    assert rows["stopped"]["stages"]["pretrain"] == "interrupted"
    # Stopped runs' wall time is their finished stages' and no longer grows; a running one's grows.
    assert rows["only"]["values"]["wall_seconds"] == 4.0 and rows["stopped"]["values"]["wall_seconds"] == 3.0
    assert rows["live"]["values"]["wall_seconds"] >= 100
    assert "5 runs (2 done, 1 failed, 1 interrupted, 1 running)" in markdown


def test_each_row_carries_every_logged_metric_of_its_run(tmp_path):
    row = rows_by_run(build_run_table([load_run_source(write_run(tmp_path / "run", name="run"))]))["run"]
    assert row["series"]["names"] == ["finetune/mrpc/examples_per_s", "finetune/mrpc/loss", "finetune/mrpc/lr",
                                      "finetune/sst2/examples_per_s", "finetune/sst2/loss", "finetune/sst2/lr",
                                      "loss", "lr", "tokens_per_s", "val_loss"]
    assert len(row["series"]["metrics"]["loss"]["step"]) == 40
    val = row["series"]["metrics"]["val_loss"]
    assert val["step"] == [20, 40] and val["value"] == [pytest.approx(7.1), pytest.approx(6.1)]
    assert build_run_table([load_run_source(tmp_path / "run")], with_series=False)["rows"][0]["series"] is None


def test_markdown_has_one_row_per_run_and_marks_scores_at_chance(tmp_path):
    _, markdown, _ = render_runs(root_of_runs(tmp_path))
    lines = markdown.splitlines()
    header = next(line for line in lines if line.startswith("| run |"))
    assert header.startswith("| run | directory | sweep | state | wall time | pretrain.lr | pretrain/steps |")
    assert "| eval/piqa/acc (baseline 0.5) |" in header
    rows = [line for line in lines if line.startswith("| ") and line != header]
    assert len(rows) == 4
    assert rows[0].startswith("| broken | `broken` | - | failed | 3s | 0.004 | - | - |")
    assert "| live | `live` | - | running | 1m " in rows[1] and " so far |" in rows[1]
    assert rows[2].startswith("| a | `lr-sweep/lr-1e-3` | lr-sweep | done | 7s | 0.001 | 40 | 6.5 | 6.83 |")
    assert "| 0.535 (≈ chance) |" in rows[2] and "| 0.415 (below baseline) |" in rows[2]
    # A | cannot split the row; HTML is shown as text.
    assert "- broken: pretrain: RuntimeError: CUDA &lt;out&gt; of memory \\| boom" in lines
    assert "4 runs (2 done, 1 failed, 1 running)" in markdown


def test_markdown_shows_names_paths_and_errors_as_text_never_as_html(tmp_path):
    # sweep.md is served by the dashboard (/sweep.md): a viewer renders HTML found in it.
    hostile = "<img src=x onerror=alert(1)>|x&y"
    write_run(tmp_path / "a", name=hostile, fail="pretrain")
    write_run(tmp_path / "b`<b>x</b>`", name="b", lr=0.002)
    _, markdown, _ = render_runs(tmp_path)
    assert "<img" not in markdown
    row = next(line for line in markdown.splitlines() if line.startswith("| &lt;img"))
    assert row.startswith("| &lt;img src=x onerror=alert(1)&gt;\\|x&amp;y | `a` |")  # one cell, one row
    assert f"- &lt;img src=x onerror=alert(1)&gt;\\|x&amp;y: pretrain: " in markdown  # the failed list
    # A backtick in a path cannot end its code span early (inside one, HTML is not parsed).
    assert "| b | `` b`<b>x</b>` `` |" in markdown


def test_the_page_embeds_the_table_safely_and_fetches_nothing(tmp_path):
    write_run(tmp_path / "a", name="</script><b>a")
    write_run(tmp_path / "b", name="b", lr=0.002)
    html, _, table = render_runs(tmp_path)
    data = re.search(r'<script type="application/json" id="runs-data">(.*?)</script>', html, re.S).group(1)
    assert "</script><b>" not in data
    assert json.loads(data)["rows"][0]["values"]["run"] == "</script><b>a"
    assert json.loads(data) == json.loads(json.dumps(table, default=str))
    assert not re.search(r'(src|href)="(?!data:)', html)  # no CDN, no network
    settings = re.search(r'id="dashboard-settings">(.*?)</script>', html).group(1)
    assert json.loads(settings)["poll_seconds"] is None  # written, not served: never polls
    served = run_table_html(table, poll_seconds=5)
    assert '"poll_seconds": 5' in served and "live: updates every 5 s" in served


def test_a_run_that_cannot_be_read_is_listed_not_fatal(tmp_path):
    write_run(tmp_path / "good", name="good")
    bad = write_run(tmp_path / "bad", name="bad")
    (bad / "pipeline.json").write_text("{not json")
    _, markdown, table = render_runs(tmp_path)
    assert [row["values"]["run"] for row in table["rows"]] == ["good"]
    assert table["problems"][0]["run_dir"].endswith("bad")
    assert f"- could not read `{bad}`: JSONDecodeError" in markdown


def test_report_root_writes_sweep_html_and_md_into_the_root_or_o(tmp_path, capsys):
    root = root_of_runs(tmp_path / "runs")
    assert main(["report", str(root / "lr-sweep")]) == 0
    assert f"wrote {root / 'lr-sweep' / 'sweep.html'} and {root / 'lr-sweep' / 'sweep.md'}" in capsys.readouterr().out
    assert "| a | `lr-1e-3` | lr-sweep | done |" in (root / "lr-sweep" / "sweep.md").read_text()
    html_path, markdown_path = write_runs_report(root, tmp_path / "out")
    assert html_path == tmp_path / "out" / "sweep.html" and markdown_path.name == "sweep.md"
    assert "4 runs" in markdown_path.read_text()
    assert main(["report", str(tmp_path / "out")]) == 2  # holds no run
    assert "is not a run directory and holds none" in capsys.readouterr().err


def test_one_run_gives_a_table_without_config_columns_and_durations_read_well(tmp_path):
    table = build_run_table([load_run_source(write_run(tmp_path / "solo", name="solo"))])
    assert [c["group"] for c in table["columns"]].count("config") == 0
    assert "| solo |" in run_table_markdown(table)
    assert [format_duration(s) for s in (None, 4.4, 65, 3725)] == ["-", "4s", "1m 05s", "1h 02m"]


def test_the_scaling_section_goes_below_the_table_and_its_failure_is_shown(tmp_path, monkeypatch):
    write_run(tmp_path / "a", name="a")
    monkeypatch.setattr(scaling, "scaling_section", lambda sources: (
        f'<p id="fit">{len(sources)} runs</p>', "## Scaling\n\nfitted\n"))
    html, markdown, table = render_runs(tmp_path)
    assert '<div id="scaling"><p id="fit">1 runs</p></div>' in html and table["scaling_html"].startswith("<p")
    assert markdown.rstrip().endswith("## Scaling\n\nfitted")

    def broken(sources):
        raise ValueError("no <fit>")

    monkeypatch.setattr(scaling, "scaling_section", broken)
    html, markdown, _ = render_runs(tmp_path)
    assert "scaling plots could not be drawn: ValueError: no &lt;fit&gt;" in html
    assert "| a |" in markdown and "scaling plots could not be drawn" in markdown

    monkeypatch.setitem(sys.modules, "views.scaling", None)  # the module is not there
    html, markdown, table = render_runs(tmp_path)
    assert table["scaling_html"] == "" and "Scaling" not in markdown
