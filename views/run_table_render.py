"""The table of every run under a root (`views.run_table`) as a page and as Markdown.

The HTML page carries the table as JSON and draws it in the browser (sortable, filtered,
runs selected for overlaid curves and a config diff; `views.page_assets`).
Served by `pretrain dashboard ROOT` it polls /runs.json and redraws in place; written as
sweep.html it holds the same data and never polls. Below the table: the scaling section
(`views.scaling`), when the runs vary in size.
"""

from __future__ import annotations

import json
import math
from typing import Any

from stages.report import (BASELINE_LEGEND, EVALUATION_LEGEND, RunSource, escape, format_duration,
    format_time, format_value, md_code, md_text, page)
from views.page_assets import SCRIPT, STYLE

DATA_URL = "runs.json"


def scaling_parts(sources: list[RunSource]) -> tuple[str, str]:
    """(html, markdown) of the scaling plots; ("", "") when the runs do not vary in size.
    A failure shows in the page instead of hiding the table above it."""
    try:
        from views.scaling import scaling_section
    except ModuleNotFoundError as error:
        if error.name != "views.scaling":
            raise
        return "", ""
    try:
        return scaling_section(sources)
    except Exception as error:  # noqa: BLE001 - the table is still worth showing
        message = f"scaling plots could not be drawn: {type(error).__name__}: {error}"
        return f'<p class="error">{escape(message)}</p>', f"_{message}_\n"


def run_table_html(table: dict[str, Any], *, poll_seconds: float | None = None) -> str:
    """A self-contained page; `poll_seconds`: redraw from /runs.json that often (served)."""
    title = f"Runs under {table['root']}" if table["root"] else "Runs"
    settings = {"poll_seconds": poll_seconds, "data_url": DATA_URL}
    when = (f"live: updates every {poll_seconds:g} s" if poll_seconds
            else f"written {format_time(table['generated'])}")
    body = f"""<h1>{escape(title)}</h1>
<p class="muted" id="status">{escape(when)}</p>
<noscript><p class="error">This page draws its table with JavaScript; sweep.md beside it holds the same table.</p></noscript>
<div id="problems"></div>
<div class="controls">
  <input id="filter" type="search" size="48" placeholder="filter: any text, or key=value (state=running, pretrain.lr>0.001)">
  <span id="shown" class="muted"></span>
  <button id="select-shown" type="button">select shown</button>
  <button id="select-none" type="button">clear selection</button>
</div>
<p id="filter-problem" role="status"></p>
<details class="picker"><summary>Columns</summary><div id="column-picker"></div></details>
<div class="table-wrap"><table id="runs" class="runs"><thead></thead><tbody></tbody></table></div>
<p class="muted">Click a header to sort (again: descending); tick runs to overlay their curves and
compare their configs. A score marked &asymp; chance or worse than baseline is no better than
ignoring the input; hover a score for its baseline. Columns, panels, axes, selection, filter and
sort are kept in the page's address: a link or a reload shows the same view.</p>
<details class="muted"><summary>Baselines</summary><p>{escape(BASELINE_LEGEND)}.</p><p>{escape(EVALUATION_LEGEND)}.</p></details>
<h2>Curves of the selected runs</h2>
<div class="controls">
  <label>x-axis <select id="x-axis"><option value="step">step</option><option value="tokens">tokens</option>
  <option value="time">wall time</option></select></label>
  <label><input id="log-y" type="checkbox"> log y</label>
  <label>smoothing <input id="smooth" type="range" min="0" max="0.99" step="0.01" value="0"></label>
  <span id="smooth-value" class="muted">0.00</span>
  <span class="muted">drag to zoom, double-click to reset; hover for values</span>
</div>
<details class="picker" open><summary>Panels: every metric the selected runs log</summary><div id="panel-picker"></div></details>
<div id="curves" class="plots"></div>
<h2>Final metric against a config key</h2>
<div id="scatter"></div>
<h2>Config differences among the selected runs</h2>
<div id="config-diff"></div>
<div id="scaling">{table.get("scaling_html", "")}</div>
<style>{STYLE}</style>
<script type="application/json" id="runs-data">{script_json(table)}</script>
<script type="application/json" id="dashboard-settings">{script_json(settings)}</script>
<script>{SCRIPT}</script>"""
    return page(title, body)


def table_json(data: Any) -> str:
    """JSON a browser parses: NaN and infinity (a diverged loss) become null."""
    return json.dumps(_finite(data), default=str, allow_nan=False)


def script_json(data: Any) -> str:
    """JSON safe inside <script>: no `</script>` or `<!--` can end it early."""
    return table_json(data).replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def run_table_markdown(table: dict[str, Any], *, scaling_markdown: str = "") -> str:
    columns = table["columns"]
    title = f"Runs under {md_code(table['root'])}" if table["root"] else "Runs"
    states: dict[str, int] = {}
    for row in table["rows"]:
        states[row["values"]["state"]] = states.get(row["values"]["state"], 0) + 1
    out = [f"# {title}", "",
           f"Generated {format_time(table['generated'])}; {len(table['rows'])} runs ("
           + ", ".join(f"{n} {md_text(state)}" for state, n in sorted(states.items())) + ").", ""]
    for problem in table["problems"]:
        out.append(f"- could not read {md_code(problem['run_dir'])}: {md_text(problem['error'])}")
    if table["problems"]:
        out.append("")
    out.append("| " + " | ".join(md_text(_header(c)) for c in columns) + " |")
    out.append("|" + "".join("---:|" if c["numeric"] else "---|" for c in columns))
    for row in table["rows"]:
        out.append("| " + " | ".join(_markdown_value(c, row) for c in columns) + " |")
    failed = [row for row in table["rows"] if row["error"]]
    if failed:
        out += ["", "Failed:", ""]
        out += [f"- {md_text(row['values']['run'])}: {md_text(row['error'])}" for row in failed]
    if any(c.get("baseline") is not None or c["group"] in ("finetune", "evaluate") for c in columns):
        out += ["", BASELINE_LEGEND + ". " + EVALUATION_LEGEND + "."]
    if scaling_markdown:
        out += ["", scaling_markdown.rstrip()]
    return "\n".join(out) + "\n"


def _header(column: dict) -> str:
    if column.get("baseline") is not None:
        return f"{column['title']} (baseline {column['baseline']:.4g})"
    return column["title"]


def _markdown_value(column: dict, row: dict) -> str:
    """One cell, as Markdown: user text is escaped here (md_text, md_code)."""
    value = row["values"].get(column["key"])
    if column["key"] == "directory":
        return md_code(value) if value else "-"
    return md_text(_plain_value(column, row, value))


def _plain_value(column: dict, row: dict, value: Any) -> str:
    if column["key"] == "wall_seconds":
        return format_duration(value) + (" so far" if row["values"]["state"] == "running" and value else "")
    if isinstance(value, (list, dict)):
        return json.dumps(value)
    text = format_value(value)
    context = row["contexts"].get(column["key"])
    if not context:
        return text
    notes = [context["label"]] if context["verdict"] not in (None, "above") and context["label"] else []
    if column.get("baseline") is None:  # runs were scored against different baselines
        notes.append(f"baseline {context['baseline']:.4g}")
    return text + (f" ({', '.join(notes)})" if notes else "")


def _finite(data: Any) -> Any:
    """NaN and infinity (a diverged loss) as None: JSON has no word for them."""
    if isinstance(data, float) and not math.isfinite(data):
        return None
    if isinstance(data, dict):
        return {key: _finite(value) for key, value in data.items()}
    if isinstance(data, (list, tuple)):
        return [_finite(value) for value in data]
    return data
