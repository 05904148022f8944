"""The script and style of the runs page (`stages.report.run_table_render`): uPlot
(stages/report/vendor/, MIT, see uPlot.LICENSE) for the curves, and runs_page.js /
runs_page.css beside this file for the table, filter, pickers and polling. All of it is
inlined into the page: sweep.html opens from disk, offline, and the dashboard fetches
nothing but runs.json.

uPlot (1.6.32, ~50 kB) rather than hand-written SVG or plotly (4.6 MB): it is made for
many long time series (canvas, not one DOM node per point) and brings the hover readout,
drag zoom, log axes and point markers the page needs.
"""

from pathlib import Path

HERE = Path(__file__).parent
VENDOR = HERE / "vendor"


def _read(path: Path) -> str:
    return path.read_text(encoding="utf-8")


# `</script>` cannot occur in these files (checked by tests/unit/test_runs_page_assets.py).
STYLE = _read(VENDOR / "uPlot.min.css") + "\n" + _read(HERE / "runs_page.css")
SCRIPT = _read(VENDOR / "uPlot.iife.min.js") + "\n" + _read(HERE / "runs_page.js")
