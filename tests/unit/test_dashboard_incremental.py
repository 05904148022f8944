"""What `pretrain dashboard ROOT` sends per poll (POST /runs.json): the table only when it
changed, and per shown run only the curve points logged after the client's cursor; the
metrics files are read incrementally, thinned, and a rewritten file starts over. A real
server on a free port (tests/support/dashboard_server.py), real run folders (tests/support/synthetic_run.py)."""

from __future__ import annotations

import json
import urllib.request

import pytest

from views.dashboard_data import table_report
from views.run_source import load_run_source
from stages.report.content import build_report
from tests.support.dashboard_server import get, serve
from tests.support.synthetic_run import write_run, write_sweep_point
from views.run_series import KEEP, RunSeries
from views.run_sweep import swept_keys


def post(url: str, body: dict) -> tuple[dict, int]:
    """(the answer, its size in bytes)."""
    request = urllib.request.Request(url + "/runs.json", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        data = response.read()
    return json.loads(data), len(data)


def pretraining(workdir):
    """A run whose pretrain stage is logging (no manifest yet); its metrics.jsonl."""
    workdir = write_run(workdir, name=workdir.name, stop_before="finetune")
    (manifest,) = workdir.glob("pretrain/*/manifest.json")
    manifest.unlink()
    return manifest.parent / "metrics.jsonl"


def log(metrics, steps, **extra):
    with open(metrics, "a") as f:
        f.writelines(json.dumps({"time": 100.0 + s, "step": s, "loss": 5.0 - s / 1000, **extra}) + "\n"
                     for s in steps)


def test_a_poll_sends_the_table_once_and_then_only_new_points(tmp_path, serve):
    metrics = pretraining(tmp_path / "root" / "live")
    url = serve(tmp_path / "root")
    run_dir = str(tmp_path / "root" / "live")
    want = {"epoch": None, "after": 0, "metrics": ["loss", "val_loss"], "full": []}
    first, _ = post(url, {"table": None, "series": {run_dir: want}})
    assert [row["values"]["run"] for row in first["table"]["rows"]] == ["live"]
    series = first["series"][run_dir]
    assert series["reset"] and series["metrics"]["loss"]["step"] == list(range(1, 41))
    assert series["metrics"]["val_loss"]["step"] == [20, 40]
    assert "lr" in series["names"] and "lr" not in series["metrics"]  # named, not sent: no panel for it

    again = {run_dir: {"epoch": series["epoch"], "after": series["cursor"], "metrics": ["loss", "val_loss"],
                       "full": ["lr"]}}
    idle, idle_bytes = post(url, {"table": first["etag"], "series": again})
    assert "table" not in idle and idle["etag"] == first["etag"]
    assert idle["series"][run_dir]["metrics"]["loss"]["step"] == []
    assert len(idle["series"][run_dir]["metrics"]["lr"]["step"]) == 40  # a panel just added: all of it

    log(metrics, range(41, 44))
    again[run_dir].update(metrics=["loss", "val_loss", "lr"], full=[])  # lr is held now
    grown, grown_bytes = post(url, {"table": first["etag"], "series": again})
    assert grown["series"][run_dir]["metrics"]["loss"] == {
        "step": [41, 42, 43], "value": [4.959, 4.958, 4.957], "time": [140.0, 141.0, 142.0]}  # since time 1.0
    assert grown["series"][run_dir]["cursor"] == series["cursor"] + 3
    assert grown_bytes < idle_bytes  # lr's 40 points were the bulk of the idle answer

    # A client whose epoch is stale (or none) gets everything again.
    stale = {run_dir: {"epoch": series["epoch"] + 7, "after": 10**6, "metrics": ["loss"], "full": []}}
    assert len(post(url, {"series": stale})[0]["series"][run_dir]["metrics"]["loss"]["step"]) == 43
    assert get(url + "/runs.json?table=" + first["etag"])[2].startswith('{"unchanged": true')


def test_a_long_series_is_thinned_and_keeps_its_latest_point(tmp_path):
    metrics = pretraining(tmp_path / "live")
    metrics.write_text("")
    log(metrics, range(1, 5001))
    series = RunSeries()
    series.update(metrics.parent, None)
    loss = series.payload(["loss"])["metrics"]["loss"]
    assert KEEP <= len(loss["step"]) <= 2 * KEEP + 1
    assert loss["step"][0] == 1 and loss["step"][-1] == 5000
    steps = loss["step"][:-1]
    assert len({b - a for a, b in zip(steps, steps[1:])}) == 1  # evenly spaced

    cursor = series.seq
    log(metrics, range(5001, 5011))
    series.update(metrics.parent, None)
    new = series.payload(["loss"], after=cursor)["metrics"]["loss"]["step"]
    assert new[-1] == 5010 and all(step > 5000 for step in new) and len(new) <= 10


def test_a_resumed_run_that_logs_steps_again_starts_a_new_epoch(tmp_path):
    metrics = pretraining(tmp_path / "live")
    series = RunSeries()
    series.update(metrics.parent, None)
    epoch = series.epoch
    log(metrics, range(30, 36))  # resumed from the step-30 checkpoint: 30-35 logged again
    series.update(metrics.parent, None)
    assert series.epoch > epoch
    loss = series.payload(["loss"])["metrics"]["loss"]
    assert loss["step"] == list(range(1, 36)) and loss["value"][-1] == 4.965  # the later record wins

    epoch = series.epoch
    metrics.write_text(metrics.read_text().splitlines(keepends=True)[0])  # rewritten, shorter
    series.update(metrics.parent, None)
    assert series.epoch > epoch and series.payload(["loss"])["metrics"]["loss"]["step"] == [1]


def test_a_torn_last_line_waits_until_it_is_whole(tmp_path):
    metrics = pretraining(tmp_path / "live")
    series = RunSeries()
    series.update(metrics.parent, None)
    with open(metrics, "a") as f:
        f.write('{"step": 41, "loss": 4.')
    series.update(metrics.parent, None)
    assert series.payload(["loss"])["metrics"]["loss"]["step"][-1] == 40
    with open(metrics, "a") as f:
        f.write('5}\n')
    series.update(metrics.parent, None)
    assert series.payload(["loss"])["metrics"]["loss"]["step"][-1] == 41


def test_config_values_all_runs_share_are_sent_once(tmp_path, serve):
    write_sweep_point(tmp_path, "p1", name="p1")
    write_sweep_point(tmp_path, "p2", name="p2", lr=0.002)
    table = json.loads(get(serve(tmp_path) + "/runs.json")[2])
    assert table["config_common"]["pretrain.max_steps"] == 40
    assert [row["config"] for row in table["rows"]] == [
        {"name": "p1", "pretrain.lr": 0.001, "workdir": str(tmp_path / "p1")},
        {"name": "p2", "pretrain.lr": 0.002, "workdir": str(tmp_path / "p2")}]


def test_an_empty_sweep_root_is_served_and_its_points_appear(tmp_path, serve):
    root = tmp_path / "sweep"  # not made yet
    url = serve(root)
    assert get(url + "/")[0] == 200
    table = json.loads(get(url + "/runs.json")[2])
    assert table["rows"] == [] and table["note"] == f"no run under {root} yet; this page shows each one as it starts"
    write_sweep_point(root, "p1", name="p1")
    assert [row["values"]["run"] for row in json.loads(get(url + "/runs.json")[2])["rows"]] == ["p1"]


def test_the_table_scores_come_out_as_the_report_makes_them(tmp_path):
    run = write_run(tmp_path / "run", name="run")
    (manifest,) = run.glob("finetune/*/manifest.json")  # scores with baselines and intervals
    finetune = json.loads(manifest.read_text())
    for task, low, high, baseline in (("sst2/accuracy", 0.47, 0.55, 0.509), ("mrpc/accuracy", 0.63, 0.73, 0.684),
                                       ("mrpc/f1", 0.75, 0.85, 0.81)):
        finetune["metrics"].update({f"{task}_ci95_low": low, f"{task}_ci95_high": high, f"{task}_baseline": baseline})
    manifest.write_text(json.dumps(finetune))
    source = load_run_source(run)
    light, full = table_report(source), build_report(source)
    assert light["finetune_context"]["sst2"]["accuracy"]["verdict"] == "chance"
    assert light["glue_average"]["baseline"] is not None
    for key in ("finetune", "finetune_context", "glue_average", "evaluation"):
        assert light[key] == full[key], key


def test_swept_keys_come_from_the_sweep_file(tmp_path):
    run = write_sweep_point(tmp_path, "p1", name="p1")
    index = json.loads((tmp_path / "sweep.json").read_text())
    index["points"][0]["overrides"] = {"pretrain.lr": 0.001, "pretrain.model.hidden_size": 64}
    (tmp_path / "sweep.json").write_text(json.dumps(index))
    assert swept_keys([load_run_source(run)]) == ["pretrain.lr", "pretrain.model.hidden_size"]
    assert swept_keys([load_run_source(write_run(tmp_path / "plain" / "run"))]) == []


@pytest.mark.parametrize("body", [b"[1, 2]", b"not json"])
def test_a_poll_that_is_not_an_object_is_answered_plainly(tmp_path, serve, body):
    write_run(tmp_path / "a", name="a")
    request = urllib.request.Request(serve(tmp_path) + "/runs.json", data=body)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            status, answer = response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        status, answer = error.code, None
    assert (status, answer is None) == ((200, False) if body.startswith(b"[") else (400, True))
