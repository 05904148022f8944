"""`pretrain report RUN_DIR RUN_DIR...`: config differences, overlaid curves, score deltas;
a RUN_DIR that is not a run is an error that writes nothing."""

from __future__ import annotations

import json
import re

from cluster.cli import main
from tests.support.synthetic_run import write_run
from views.compare import default_output_dir
from views.comparison import build_comparison, config_differences, overlaid_panels
from views.run_source import load_run_source


def two_runs(tmp_path):
    base = write_run(tmp_path / "base", name="base", lr=0.001, accuracy=0.50)
    other = write_run(tmp_path / "other", name="other", lr=0.002, accuracy=0.60)
    return base, other


def test_report_command_writes_html_and_md_with_deltas(tmp_path, capsys):
    base, other = two_runs(tmp_path)
    out = tmp_path / "cmp"
    assert main(["report", str(base), str(other), "-o", str(out)]) == 0
    assert str(out / "report.html") in capsys.readouterr().out

    md = (out / "report.md").read_text()
    assert "| pretrain.lr | 0.001 | 0.002 |" in md
    assert "| sst2 | accuracy | 0.5 | 0.6 (+0.1) |" in md
    html = (out / "report.html").read_text()
    assert '<span class="better">(+0.1)</span>' in html
    # One plot per panel, every line of every run inside it, all embedded.
    assert len(re.findall(r'src="data:image/png;base64,', html)) == 6
    assert not re.search(r'(src|href)="(?!data:)', html)
    data = json.loads((out / "comparison.json").read_text())
    assert [r["label"] for r in data["runs"]] == ["base", "other"]


def test_curves_are_overlaid_one_line_per_run(tmp_path):
    panels = overlaid_panels([load_run_source(d) for d in two_runs(tmp_path)])
    assert set(panels["Pretraining: training loss"]) == {"base", "other"}
    assert set(panels["Fine-tuning loss: mrpc"]) == {"base", "other"}


def test_lower_loss_is_the_better_delta(tmp_path):
    comparison = build_comparison([load_run_source(d) for d in two_runs(tmp_path)])
    row = next(r for r in comparison["metrics"] if r["metric"] == "final_loss")
    assert row["lower_is_better"] and row["deltas"][0] == 0.0


def test_config_differences_ignore_name_and_workdir():
    rows = config_differences([{"name": "a", "workdir": "/a", "pretrain": {"lr": 1, "steps": 5}},
                               {"name": "b", "workdir": "/b", "pretrain": {"lr": 2, "steps": 5}, "x": 1}])
    assert rows == [{"key": "pretrain.lr", "values": [1, 2]}, {"key": "x", "values": [None, 1]}]


def test_same_experiment_name_gets_distinct_labels_and_default_dir(tmp_path):
    first = write_run(tmp_path / "one", name="same")
    second = write_run(tmp_path / "two", name="same", lr=0.002)
    sources = [load_run_source(first), load_run_source(second)]
    assert [r["label"] for r in build_comparison(sources)["runs"]] == ["same", "two"]
    assert str(default_output_dir(sources)) == "reports/compare-same-two"


def test_a_run_dir_that_is_not_a_run_writes_nothing(tmp_path, capsys):
    base, _ = two_runs(tmp_path)
    not_a_run = tmp_path / "empty"
    not_a_run.mkdir()
    out = tmp_path / "cmp"
    assert main(["report", str(base), str(not_a_run), "-o", str(out)]) == 2
    assert "is not a run directory" in capsys.readouterr().err
    assert main(["report", str(tmp_path / "missing"), "-o", str(out)]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert not out.exists()


def test_one_run_dir_renders_that_runs_report(tmp_path):
    base, _ = two_runs(tmp_path)
    out = tmp_path / "single"
    assert main(["report", str(base), "-o", str(out)]) == 0
    assert "| pretrain | done |" in (out / "report.md").read_text()
