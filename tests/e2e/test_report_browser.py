"""report.html in a real browser (Debian's headless Chromium, installed by the Makefile's
test setup): no console errors, every plot decodes to an image, the tables are there.
A screenshot stays in the test's tmp_path (report.png).

The report itself runs no JavaScript; to ask the browser whether the images decoded, the
test renders a copy with a small probe script appended and reads its verdict from the DOM.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from views.compare import write_comparison
from views.run_source import load_run_source
from stages.report.run import write_report
from tests.support.synthetic_run import write_run

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
PROBE = """<script>
window.addEventListener("load", () => {
  const images = [...document.images];
  const decoded = images.filter(i => i.complete && i.naturalWidth > 100 && i.naturalHeight > 100);
  const probe = document.createElement("div");
  probe.id = "probe";
  probe.textContent = `images=${images.length} decoded=${decoded.length} tables=${document.querySelectorAll("table").length}`;
  document.body.appendChild(probe);
});
</script>"""


def chromium(page: Path | str, profile: Path, *extra: str, budget_ms: int = 5000) -> subprocess.CompletedProcess:
    """Headless Chromium on a file (Path) or a URL (str, e.g. a served dashboard)."""
    if CHROMIUM is None:
        pytest.fail("chromium is not installed: run `make test` (its setup installs Debian's chromium) "
                    "or `apt-get install -y chromium`")
    # A fresh profile, and no network, sync or update traffic: the page must stand alone.
    return subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--no-proxy-server", f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0",
         f"--virtual-time-budget={budget_ms}", *extra, page if isinstance(page, str) else page.as_uri()],
        capture_output=True, text=True, timeout=120)


def console_messages(stderr: str) -> list[str]:
    """Lines the page itself logged (console calls, uncaught errors, failed loads)."""
    return [line for line in stderr.splitlines() if ":CONSOLE" in line or "net::ERR_" in line]


def probe(page: Path, tmp_path: Path) -> dict[str, int]:
    probed = page.with_name(f"probed-{page.name}")
    probed.write_text(page.read_text().replace("</body>", PROBE + "</body>"))
    result = chromium(probed, tmp_path / "profile-probe", "--dump-dom")
    found = re.search(r'<div id="probe">([^<]*)</div>', result.stdout)
    assert found, f"the probe did not run:\n{result.stderr[-2000:]}"
    return {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", found.group(1))}


@pytest.fixture(scope="module")
def report_html(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("browser")
    out = root / "report"
    out.mkdir()
    write_report(load_run_source(write_run(root / "run", resumed=True)), out)
    return out / "report.html"


def test_report_renders_without_console_errors_and_keeps_a_screenshot(report_html, tmp_path):
    screenshot = tmp_path / "report.png"
    result = chromium(report_html, tmp_path / "profile", f"--screenshot={screenshot}",
                      "--window-size=1280,2400", "--hide-scrollbars")
    assert result.returncode == 0, result.stderr[-2000:]
    assert console_messages(result.stderr) == []
    assert screenshot.stat().st_size > 20_000, "the screenshot is (nearly) blank"

    dom = chromium(report_html, tmp_path / "profile-dom", "--dump-dom").stdout
    for css_class in ("stages", "problems", "finetune", "evaluation", "lineage", "stats stats-ingest"):
        assert f'<table class="{css_class}">' in dom
    assert "| sst2 |" not in dom and "<td>sst2</td>" in dom


def test_every_plot_decodes_in_the_browser(report_html, tmp_path):
    verdict = probe(report_html, tmp_path)
    # 4 pretraining panels, fine-tuning loss, 5 zero/few-shot panels across training (cloze,
    # multiple choice, bits per byte, and each of two tasks' perplexities on its own axis)
    assert verdict["images"] == 10 and verdict["decoded"] == 10, verdict


def test_comparison_page_plots_decode(tmp_path):
    runs = [write_run(tmp_path / "a", name="a"), write_run(tmp_path / "b", name="b", lr=0.002)]
    page = write_comparison([str(r) for r in runs], str(tmp_path / "cmp")) / "report.html"
    result = chromium(page, tmp_path / "profile", f"--screenshot={tmp_path / 'comparison.png'}")
    assert console_messages(result.stderr) == []
    verdict = probe(page, tmp_path)
    assert verdict["images"] == verdict["decoded"] == 6, verdict


def test_the_checks_catch_a_broken_page(tmp_path):
    """The two checks above can fail: a script error and an image that does not load."""
    page = tmp_path / "broken.html"
    page.write_text('<!DOCTYPE html><html><head><link rel="icon" href="data:,"></head><body>'
                    '<img src="missing.png"><script>undefinedFunction();</script></body></html>')
    assert any("undefinedFunction" in line for line in console_messages(chromium(page, tmp_path / "p").stderr))
    assert probe(page, tmp_path) == {"images": 1, "decoded": 0, "tables": 0}
