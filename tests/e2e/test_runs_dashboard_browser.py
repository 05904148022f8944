"""The runs page of `pretrain dashboard ROOT` in headless Chromium, served by the real
server: one row per run, sorting by a header both ways, two selected runs overlaid in
every curve panel, the filter, and a run added while the page is open appearing after a
poll, with the sort and selection kept; and sweep.html opened from disk, without a server.

The page is the served one with a probe script appended (a Dashboard whose render adds
it), so the probe runs against the same origin, polls included. The probe clicks and
types, then writes what it saw into the DOM as JSON for --dump-dom to hand back.
"""

from __future__ import annotations

import html
import json
import re
import subprocess
import threading
from urllib.parse import parse_qs

import pytest

from storage.stage_lock import StageLock
from views.dashboard import Dashboard, make_server
from views.runs_report import write_runs_report
from tests.e2e.test_report_browser import chromium, console_messages
from tests.support.synthetic_run import write_run, write_sweep_point

PROBE = """<script>
window.addEventListener("load", async () => {
  const sleep = ms => new Promise(done => setTimeout(done, ms));
  const until = async test => { for (let i = 0; i < 50 && !test(); i += 1) await sleep(200); };
  const page = window.runsPage;
  const rows = () => [...document.querySelectorAll("#runs tbody tr")];
  const labels = () => rows().map(row => row.querySelector('td[data-key="run"]').textContent);
  const headers = () => [...document.querySelectorAll("#runs th[data-key]")].map(th => th.dataset.key);
  const header = () => document.querySelector('#runs th[data-key="metric:pretrain/final_loss"]');
  const lines = () => Object.fromEntries([...page.charts].map(([name, chart]) => [name, chart.plot.series.length - 1]));
  const tick = name => rows().find(row => row.querySelector('td[data-key="run"]').textContent === name)
    .querySelector("input[type=checkbox]").click();
  const filter = text => {
    const box = document.getElementById("filter");
    box.value = text;
    box.dispatchEvent(new Event("input"));
    return labels();
  };
  const seen = {rows: labels(), headers: headers(), selected_at_first: page.selected.size,
                states: Object.fromEntries(rows().map(row => [row.querySelector('td[data-key="run"]').textContent,
                                                           row.querySelector('td[data-key="state"]').textContent]))};
  header().click();
  seen.ascending = labels();
  header().click();
  seen.descending = labels();
  document.getElementById("select-none").click();
  tick("a");
  tick("b");
  await until(() => lines().loss === 2 && lines().val_loss === 2);
  seen.lines = lines();
  seen.panel_choices = [...document.querySelectorAll("#panel-picker input")].map(box => box.dataset.metric);
  seen.config_diff = [...document.querySelectorAll("#config-diff tbody tr")].map(
    row => [...row.cells].map(cell => cell.textContent));
  // A series of one point (the live run validated once) shows as a marker.
  document.getElementById("select-none").click();
  tick("live");
  await until(() => lines().val_loss === 1);
  const plot = page.charts.get("val_loss").plot;
  const x = plot.valToPos(plot.data[0][0], "x", true), y = plot.valToPos(plot.data[1][0], "y", true);
  seen.one_point = {points: plot.data[0].length,
                    pixel: [...plot.ctx.getImageData(Math.round(x), Math.round(y), 1, 1).data]};
  seen.filter_state = filter("state=running");
  seen.filter_done = filter("state=done");
  seen.filter_text = filter("lr-sweep/");
  seen.filter_number = filter("pretrain.lr>0.0015");
  seen.unknown_key = {rows: filter("lr=0.001"), problem: document.getElementById("filter-problem").textContent};
  filter("");
  seen.problem_after = document.getElementById("filter-problem").textContent;
  document.querySelector('#column-picker input[data-key="state"]').click();
  seen.headers_picked = headers();
  seen.hash = location.hash;
  await until(() => rows().length >= 5);
  seen.after_poll = labels();
  seen.sorted_after_poll = header().classList.contains("desc");
  seen.lines_after_poll = lines();
  seen.status = document.getElementById("status").textContent;
  // Log y and the other x-axes (a log axis hands uPlot's tick labeller nulls: no error).
  document.getElementById("log-y").click();
  const xAxis = document.getElementById("x-axis");
  xAxis.value = "time";
  xAxis.dispatchEvent(new Event("change"));
  seen.time_axis = page.charts.get("loss").plot.series[0].label;
  xAxis.value = "tokens";
  xAxis.dispatchEvent(new Event("change"));
  seen.tokens_note = document.querySelector('#curves figure[data-panel="loss"] p.note').textContent;
  seen.view_hash = location.hash;
  const out = document.createElement("pre");
  out.id = "probe";
  out.textContent = JSON.stringify(seen);
  document.body.append(out);
});
</script>"""


class ProbedDashboard(Dashboard):
    """The real dashboard; its page carries the probe, and its first /runs.json answer is
    followed by a new run under the root (a sweep point that starts while the page is open)."""

    def __init__(self, *args, new_run, **kwargs):
        super().__init__(*args, **kwargs)
        self.new_run = new_run
        self.polls = 0

    def render(self):
        page, markdown = super().render()
        return page.replace("</body>", PROBE + "</body>"), markdown

    def poll(self, request):
        body = super().poll(request)
        self.polls += 1
        if self.polls == 1:
            self.new_run()
        return body


@pytest.fixture
def locks():
    """Stage locks the test holds, as a live driver would; released after it."""
    held = []
    yield held
    for lock in held:
        lock.release()


def root_of_runs(root, locks=None):
    """Different configs and losses, one failed, one still pretraining (no manifest; a
    driver, this test, holds its stage lock when `locks` collects it)."""
    sweep = root / "lr-sweep"
    write_sweep_point(sweep, "lr-1e-3", sweep="lr-sweep", name="a", pretrain_metrics={"final_loss": 6.5})
    write_sweep_point(sweep, "lr-2e-3", sweep="lr-sweep", name="b", lr=0.002, pretrain_metrics={"final_loss": 6.1})
    write_run(root / "c", name="c", lr=0.004, pretrain_metrics={"final_loss": 6.9})
    live = write_run(root / "live", name="live", lr=0.003, stop_before="finetune")
    (manifest,) = live.glob("pretrain/*/manifest.json")
    manifest.unlink()
    metrics = manifest.parent / "metrics.jsonl"  # 25 steps so far: validated once, at step 20
    metrics.write_text("".join(metrics.read_text().splitlines(keepends=True)[:25]))
    if locks is not None:
        lock = StageLock(manifest.parent.parent / f".{manifest.parent.name}.lock", what="pretrain")
        lock.acquire()
        locks.append(lock)
    return root


def dump_dom(url: str, profile, budget_ms: int) -> subprocess.CompletedProcess:
    return chromium(url, profile, "--dump-dom", budget_ms=budget_ms)


def probe_page(url: str, profile, budget_ms: int) -> dict:
    result = dump_dom(url, profile, budget_ms)
    found = re.search(r'<pre id="probe">([^<]*)</pre>', result.stdout)
    assert found, f"the probe did not finish:\n{result.stderr[-3000:]}"
    assert console_messages(result.stderr) == []
    return json.loads(html.unescape(found.group(1)))


def test_the_served_page_sorts_filters_draws_curves_and_updates_live(tmp_path, locks):
    root = root_of_runs(tmp_path / "runs", locks)
    dashboard = ProbedDashboard([root], poll_seconds=1,
                                new_run=lambda: write_run(root / "d", name="d", lr=0.005,
                                                          pretrain_metrics={"final_loss": 6.3}))
    server = make_server(dashboard, "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    # The columns come from the address: a link shows the columns it names.
    columns = "run,state,metric:pretrain/final_loss,config:pretrain.lr"
    try:
        # Virtual time: each 1 s poll waits for the real server, the rest passes at once.
        seen = probe_page(f"http://127.0.0.1:{server.server_address[1]}/#cols={columns}", tmp_path / "profile", 20_000)
    finally:
        server.shutdown()
        server.server_close()

    assert seen["headers"] == columns.split(",")
    assert seen["rows"] == ["c", "live", "a", "b"]  # by directory: c, live, lr-sweep/...
    assert seen["states"] == {"c": "done", "live": "running", "a": "done", "b": "done"}
    assert seen["selected_at_first"] == 4  # no selection in the address: the first runs shown
    assert seen["ascending"] == ["b", "a", "c", "live"]   # 6.1, 6.5, 6.9, still running: last
    assert seen["descending"] == ["c", "a", "b", "live"]  # missing values stay last
    assert seen["lines"] == {"loss": 2, "val_loss": 2, "finetune/mrpc/loss": 2, "finetune/sst2/loss": 2}
    assert {"lr", "tokens_per_s", "finetune/sst2/lr"} <= set(seen["panel_choices"])  # every logged metric
    assert seen["config_diff"] == [["pretrain.lr", "0.001", "0.002"]]
    assert seen["one_point"]["points"] == 1
    assert seen["one_point"]["pixel"] == [31, 119, 180, 255]  # the marker, in the run's colour
    # d (finished, lr 0.005) may have come in a poll by then: leave it out.
    def without_d(labels):
        return [label for label in labels if label != "d"]

    assert without_d(seen["filter_state"]) == ["live"]
    assert without_d(seen["filter_done"]) == ["c", "a", "b"]
    assert seen["filter_text"] == ["a", "b"]
    assert without_d(seen["filter_number"]) == ["c", "b", "live"]  # lr 0.004, 0.002, 0.003; sorted as before
    assert seen["unknown_key"] == {"rows": [], "problem": "no key lr; did you mean pretrain.lr?"}
    assert seen["problem_after"] == ""
    assert seen["headers_picked"] == ["run", "metric:pretrain/final_loss", "config:pretrain.lr"]
    assert parse_qs(seen["hash"][1:])["cols"] == ["run,metric:pretrain/final_loss,config:pretrain.lr"]
    assert seen["after_poll"] == ["c", "a", "d", "b", "live"], seen["status"]  # d: 6.3, sort kept
    assert seen["sorted_after_poll"] and seen["lines_after_poll"]["val_loss"] == 1  # selection kept
    assert seen["status"].startswith("live: updated"), seen["status"]
    assert dashboard.polls >= 2
    assert seen["time_axis"] == "wall time"
    assert seen["tokens_note"] == "tokens per step unknown for live"  # its records lack samples_per_s
    view = parse_qs(seen["view_hash"][1:])
    assert view["x"] == ["tokens"] and view["log"] == ["1"] and view["sel"] == ["live"]


EMPTY_ROOT_PROBE = """<script>
window.addEventListener("load", async () => {
  const seen = {note: document.getElementById("problems").textContent};
  for (let i = 0; i < 50 && !document.querySelector("#runs tbody tr"); i += 1) {
    await new Promise(done => setTimeout(done, 200));
  }
  seen.rows = [...document.querySelectorAll('#runs tbody td[data-key="run"]')].map(td => td.textContent);
  seen.states = [...document.querySelectorAll('#runs tbody td[data-key="state"]')].map(td => td.textContent);
  const out = document.createElement("pre");
  out.id = "probe";
  out.textContent = JSON.stringify(seen);
  document.body.append(out);
});
</script>"""


class EmptyRootDashboard(ProbedDashboard):
    def render(self):
        page, markdown = Dashboard.render(self)
        return page.replace("</body>", EMPTY_ROOT_PROBE + "</body>"), markdown


def test_the_page_opens_on_a_sweep_root_not_made_yet_and_shows_points_as_they_start_done_when_done(tmp_path):
    root = tmp_path / "sweep"  # `pretrain sweep` has not made it yet
    # The point that starts is a finished `--only ... --only pretrain` run: done, not pending.
    dashboard = EmptyRootDashboard([root], poll_seconds=1, new_run=lambda: write_sweep_point(
        root, "p1", name="p1", stop_before="finetune", selected=["ingest", "tokenizer", "dataset", "pretrain"]))
    server = make_server(dashboard, "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        seen = probe_page(f"http://127.0.0.1:{server.server_address[1]}/", tmp_path / "profile", 8_000)
    finally:
        server.shutdown()
        server.server_close()
    assert seen["note"] == f"no run under {root} yet; this page shows each one as it starts"
    assert seen["rows"] == ["p1"] and seen["states"] == ["done"]


def test_sweep_html_from_disk_draws_its_table_without_a_server(tmp_path):
    root = root_of_runs(tmp_path / "runs")
    html_path, _ = write_runs_report(root / "lr-sweep")
    result = dump_dom(html_path.as_uri(), tmp_path / "profile", 2_000)
    assert console_messages(result.stderr) == []
    assert len(re.findall(r'<tr data-run="', result.stdout)) == 2
    # The curves come with the page: two runs selected, a uPlot chart per loss panel.
    assert len(re.findall(r'<figure class="panel" data-panel="(?!scatter)', result.stdout)) == 4
    assert result.stdout.count('class="uplot') == 5  # and the loss-vs-lr plot
    status = re.search(r'<p class="muted" id="status">([^<]*)</p>', result.stdout).group(1)
    assert status.startswith("written 20"), status  # a snapshot: it never polls
