"""`pretrain dashboard`: a real HTTP server on a free port, in a thread; each request
re-reads the run, so a run in progress shows new steps; the page asks /version.json and
swaps in its new body when the run changed (no meta refresh, no reload)."""

from __future__ import annotations

import json
import re

import pytest

from cluster.cli import main
from pipeline.config import ConfigError
from tests.support.dashboard_server import get, serve
from tests.support.synthetic_run import write_run
from views.dashboard import Dashboard
from tests.unit.test_run_state import hold_lock


def pretrain_in_progress(tmp_path):
    """A run whose pretrain stage is running: metrics.jsonl but no manifest yet."""
    workdir = write_run(tmp_path / "live", stop_before="finetune")
    (manifest,) = workdir.glob("pretrain/*/manifest.json")
    manifest.unlink()
    return workdir, manifest.parent / "metrics.jsonl"


def training_loss_png(html: str) -> str:
    return re.search(r'alt="Pretraining: training loss" src="data:image/png;base64,([^"]+)"', html).group(1)


def test_a_run_in_progress_is_served_live(tmp_path, serve):
    workdir, metrics = pretrain_in_progress(tmp_path)
    # A driver writing pretrain holds its stage lock: that is what makes a run live (a
    # folder without a manifest and without a holder was interrupted).
    lock = hold_lock(workdir, "pretrain")
    try:
        serve_live_run(workdir, metrics, serve)
    finally:
        lock.release()
    assert json.loads(get(serve(workdir) + "/version.json")[2])["refresh_seconds"] == 60  # interrupted


def serve_live_run(workdir, metrics, serve):
    url = serve(workdir)

    status, content_type, html = get(url + "/")
    assert status == 200 and content_type.startswith("text/html")
    assert "http-equiv" not in html and 'fetch("version.json"' in html
    assert "| pretrain | incomplete |" in get(url + "/report.md")[2]
    before = training_loss_png(html)
    version = json.loads(get(url + "/version.json")[2])
    assert version["refresh_seconds"] == 10 and json.loads(get(url + "/version.json")[2]) == version

    with open(metrics, "a") as f:  # training goes on
        f.write(json.dumps({"step": 41, "loss": 5.0, "lr": 0.001}) + "\n")
    assert json.loads(get(url + "/version.json")[2])["version"] != version["version"]
    after = training_loss_png(get(url + "/")[2])
    assert after != before, "the page was not regenerated from the run directory"


def test_several_runs_are_compared_and_unknown_paths_are_404(tmp_path, serve):
    url = serve(write_run(tmp_path / "a", name="a"), write_run(tmp_path / "b", name="b", lr=0.002))
    status, _, html = get(url + "/")
    assert status == 200 and "Comparison: a vs b" in html
    assert json.loads(get(url + "/version.json")[2])["refresh_seconds"] == 60  # both finished
    assert get(url + "/etc/passwd")[0] == 404


def test_a_run_dir_that_is_not_a_run_is_refused(tmp_path, capsys):
    with pytest.raises(ConfigError, match="not a run directory"):
        (tmp_path / "b").mkdir()
        Dashboard([write_run(tmp_path / "a", name="a"), tmp_path / "b"])  # RUN_DIRs: each must be a run
    assert main(["dashboard", str(tmp_path / "no" / "such"), "--port", "0"]) == 2
    assert "does not exist" in capsys.readouterr().err
