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


from pipeline.dashboard import Dashboard, make_server
from pipeline.runs_report import write_runs_report
from tests.e2e.test_report_browser import chromium, console_messages
from tests.synthetic_run import write_run, write_sweep_point

PROBE = """<script>
window.addEventListener("load", async () => {
  const sleep = ms => new Promise(done => setTimeout(done, ms));
  const rows = () => [...document.querySelectorAll("#runs tbody tr")];
  const labels = () => rows().map(row => row.querySelector('td[data-key="run"]').textContent);
  const header = () => document.querySelector('#runs th[data-key="metric:pretrain/final_loss"]');
  const paths = () => Object.fromEntries([...document.querySelectorAll("#curves figure")].map(
    figure => [figure.dataset.panel, figure.querySelectorAll("path.line").length]));
  const tick = name => rows().find(row => row.querySelector('td[data-key="run"]').textContent === name)
    .querySelector("input[type=checkbox]").click();
  const filter = text => {
    const box = document.getElementById("filter");
    box.value = text;
    box.dispatchEvent(new Event("input"));
    return labels();
  };
  const seen = {rows: labels()};
  header().click();
  seen.ascending = labels();
  header().click();
  seen.descending = labels();
  tick("a");
  tick("b");
  seen.paths = paths();
  seen.config_diff = [...document.querySelectorAll("#config-diff tbody tr")].map(
    row => [...row.cells].map(cell => cell.textContent));
  seen.filter_state = filter("state=running");
  seen.filter_text = filter("lr-sweep/");
  seen.filter_number = filter("pretrain.lr>0.0015");
  filter("");
  for (let i = 0; i < 50 && rows().length < 5; i += 1) await sleep(200);
  seen.after_poll = labels();
  seen.sorted_after_poll = header().classList.contains("desc");
  seen.paths_after_poll = paths();
  seen.status = document.getElementById("status").textContent;
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

    def runs_json(self):
        body = super().runs_json()
        self.polls += 1
        if self.polls == 1:
            self.new_run()
        return body


def root_of_runs(root):
    """Different configs and losses, one failed, one still pretraining (no manifest)."""
    sweep = root / "lr-sweep"
    write_sweep_point(sweep, "lr-1e-3", sweep="lr-sweep", name="a", pretrain_metrics={"final_loss": 6.5})
    write_sweep_point(sweep, "lr-2e-3", sweep="lr-sweep", name="b", lr=0.002, pretrain_metrics={"final_loss": 6.1})
    write_run(root / "c", name="c", lr=0.004, pretrain_metrics={"final_loss": 6.9})
    live = write_run(root / "live", name="live", lr=0.003, stop_before="finetune")
    (manifest,) = live.glob("pretrain/*/manifest.json")
    manifest.unlink()
    return root


def dump_dom(url: str, profile, budget_ms: int) -> subprocess.CompletedProcess:
    return chromium(url, profile, "--dump-dom", budget_ms=budget_ms)


def test_the_served_page_sorts_filters_overlays_and_updates_live(tmp_path):
    root = root_of_runs(tmp_path / "runs")
    dashboard = ProbedDashboard([root], poll_seconds=1,
                                new_run=lambda: write_run(root / "d", name="d", lr=0.005,
                                                          pretrain_metrics={"final_loss": 6.3}))
    server = make_server(dashboard, "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        # Virtual time: each 1 s poll waits for the real server, the rest passes at once.
        result = dump_dom(f"http://127.0.0.1:{server.server_address[1]}/", tmp_path / "profile", 15_000)
    finally:
        server.shutdown()
        server.server_close()
    found = re.search(r'<pre id="probe">([^<]*)</pre>', result.stdout)
    assert found, f"the probe did not finish:\n{result.stderr[-3000:]}"
    seen = json.loads(html.unescape(found.group(1)))
    assert console_messages(result.stderr) == []

    assert seen["rows"] == ["c", "live", "a", "b"]  # by directory: c, live, lr-sweep/...
    assert seen["ascending"] == ["b", "a", "c", "live"]   # 6.1, 6.5, 6.9, still running: last
    assert seen["descending"] == ["c", "a", "b", "live"]  # missing values stay last
    assert seen["paths"] == {"Pretraining: training loss": 2, "Pretraining: validation loss": 2,
                             "Fine-tuning loss: mrpc": 2, "Fine-tuning loss: sst2": 2}
    assert seen["config_diff"] == [["pretrain.lr", "0.001", "0.002"]]
    assert seen["filter_state"] == ["live"]
    assert seen["filter_text"] == ["a", "b"]
    assert seen["filter_number"] == ["c", "b", "live"]  # lr 0.004, 0.002, 0.003; sorted as before
    assert seen["after_poll"] == ["c", "a", "d", "b", "live"], seen["status"]  # d: 6.3, sort kept
    assert seen["sorted_after_poll"] and seen["paths_after_poll"] == seen["paths"]  # selection kept
    assert seen["status"].startswith("live: updated"), seen["status"]
    assert dashboard.polls >= 2


def test_sweep_html_from_disk_draws_its_table_without_a_server(tmp_path):
    root = root_of_runs(tmp_path / "runs")
    html_path, _ = write_runs_report(root / "lr-sweep")
    result = dump_dom(html_path.as_uri(), tmp_path / "profile", 2_000)
    assert console_messages(result.stderr) == []
    assert len(re.findall(r'<tr data-run="', result.stdout)) == 2
    status = re.search(r'<p class="muted" id="status">([^<]*)</p>', result.stdout).group(1)
    assert status.startswith("written 20"), status  # a snapshot: it never polls
