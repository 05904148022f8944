"""`pretrain dashboard ROOT`: a real server on a free port, in a thread, serving the table
of every run under ROOT at / and as JSON at /runs.json, found again on every request."""

from __future__ import annotations

import json
import shutil

from tests.support.dashboard_server import get, serve  # noqa: F401 - serve is a fixture
from tests.support.synthetic_run import write_run, write_sweep_point


def test_new_sweep_points_appear_on_the_next_request(tmp_path, serve):
    write_sweep_point(tmp_path, "p1", name="p1")
    url = serve(tmp_path)
    status, content_type, html = get(url + "/")
    assert status == 200 and content_type.startswith("text/html")
    assert '"poll_seconds": 5' in html and "http-equiv" not in html  # redraws in place, no reload
    status, content_type, body = get(url + "/runs.json")
    assert status == 200 and content_type == "application/json"
    assert [row["values"]["run"] for row in json.loads(body)["rows"]] == ["p1"]

    write_sweep_point(tmp_path, "p2", name="p2", lr=0.002)
    rows = json.loads(get(url + "/runs.json")[2])["rows"]
    assert [row["values"]["run"] for row in rows] == ["p1", "p2"]
    assert "| p2 | `p2` | sweep | done |" in get(url + "/sweep.md")[2]


def test_a_root_whose_runs_are_gone_says_so_and_the_server_keeps_serving(tmp_path, serve):
    run = write_run(tmp_path / "only", name="only")
    url = serve(tmp_path)
    shutil.rmtree(run)  # every run gone: an empty table that says why, not an error
    status, _, body = get(url + "/runs.json")
    assert status == 200 and json.loads(body)["rows"] == []
    assert f"no run under {tmp_path} yet" in json.loads(body)["note"]
    assert get(url + "/")[0] == 200
    write_run(tmp_path / "again", name="again")
    assert [row["values"]["run"] for row in json.loads(get(url + "/runs.json")[2])["rows"]] == ["again"]
    assert get(url + "/report.md")[0] == 404  # a run's page, not the root's


def test_runs_json_is_not_served_for_run_dirs(tmp_path, serve):
    url = serve(write_run(tmp_path / "a", name="a"))
    assert get(url + "/runs.json")[0] == 404


def test_the_scaling_plots_are_drawn_again_only_when_a_run_changes(tmp_path, monkeypatch):
    import views.runs_report as runs_report
    from views.run_source import load_run_source

    drawn = []
    monkeypatch.setattr(runs_report, "scaling_parts", lambda sources: (drawn.append(1), ("<p>fit</p>", ""))[1])
    live = write_run(tmp_path / "live", name="live", stop_before="finetune")
    (manifest,) = live.glob("pretrain/*/manifest.json")
    finished = manifest.read_text()
    manifest.unlink()  # pretraining
    cache = runs_report.ScalingCache()
    assert cache([load_run_source(live)]) == ("<p>fit</p>", "")
    with open(next(live.glob("pretrain/*/metrics.jsonl")), "a") as f:
        f.write(json.dumps({"step": 41, "loss": 5.0}) + "\n")
    cache([load_run_source(live)])
    assert len(drawn) == 1  # polled again: a step more, no stage finished
    manifest.write_text(finished)
    cache([load_run_source(live)])
    assert len(drawn) == 2
