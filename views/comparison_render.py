"""The comparison as HTML (with overlaid plots) and as Markdown."""

from __future__ import annotations

from typing import Any

from stages.report import (Raw, RunSource, escape, format_time, format_value, line_plot_png,
    md_code, md_text, page, plot_figure, table, verdict_label)
from views.comparison import overlaid_panels


def comparison_html(comparison: dict[str, Any], sources: list[RunSource], *,
                    refresh_seconds: int | None = None) -> str:
    labels = [run["label"] for run in comparison["runs"]]
    plots = [plot_figure(title, line_plot_png(title, lines))
             for title, lines in overlaid_panels(sources).items()]
    runs = table(["run", "experiment", "directory", "stages"],
                 [[r["label"], r["experiment"], r["run_dir"],
                   ", ".join(f"{s}: {state}" for s, state in r["stages"].items())]
                  for r in comparison["runs"]], css_class="runs")
    body = [
        f"<h1>Comparison: {escape(' vs '.join(labels))}</h1>",
        f'<p class="muted">Generated {escape(format_time(comparison["generated"]))}; '
        f"deltas are against <b>{escape(labels[0])}</b>.</p>",
        "<h2>Runs</h2>", runs,
        "<h2>Config differences</h2>", _config_table(comparison, labels),
        "<h2>Scores</h2>", _metrics_table(comparison, labels),
        "<h2>Curves</h2>",
        '<div class="plots">' + "".join(plots) + "</div>" if plots else "<p>No training metrics.</p>",
    ]
    return page("comparison: " + " vs ".join(labels), "\n".join(body), refresh_seconds=refresh_seconds)


def _config_table(comparison: dict, labels: list[str]) -> str:
    rows = comparison["config_differences"]
    if not rows:
        return "<p>The configs are identical (apart from name, workdir and store).</p>"
    return table(["key", *labels], [[row["key"], *row["values"]] for row in rows], css_class="config-diff")


def _metrics_table(comparison: dict, labels: list[str]) -> str:
    if not comparison["metrics"]:
        return "<p>No scores yet.</p>"
    headers = ["stage / task", "metric", labels[0]] + [f"{label} (delta)" for label in labels[1:]]
    rows = []
    for row in comparison["metrics"]:
        count = len(row["values"])
        contexts = row.get("contexts") or [None] * count
        caveats = row.get("caveats") or [None] * count
        significant = row.get("significant") or [None] * count
        cells: list[Any] = [row["group"], row["metric"],
                            Raw(escape(format_value(row["values"][0])) + _chance_html(contexts[0]))]
        for i in range(1, count):
            delta = _delta_html(row["deltas"][i], row["lower_is_better"], caveats[i], significant[i])
            cells.append(Raw(f"{escape(format_value(row['values'][i]))} {delta}" + _chance_html(contexts[i])))
        rows.append(cells)
    return (table(headers, rows, numeric=range(2, len(headers)), css_class="scores")
            + f'<p class="muted">{escape(DELTA_LEGEND)}</p>')


def _chance_html(context: dict | None) -> str:
    """A badge on a score that is not better than its baseline (nothing where it is, or unknown)."""
    if not context or context["verdict"] in (None, "above"):
        return ""
    kind = context["verdict"]
    return (f' <span class="badge badge-{kind}" title="baseline {context["baseline"]:.4f}">'
            f"{escape(verdict_label(context))}</span>")


def _chance_text(context: dict | None) -> str:
    if not context or context["verdict"] in (None, "above"):
        return ""
    return f" ({verdict_label(context)}, baseline {context['baseline']:.4g})"


DELTA_LEGEND = ("(delta) against the first run: green better, red worse, only where the two numbers "
                "compare; ✱ significant: the two 95% intervals do not overlap; n.s.: they overlap (a "
                "difference that chance explains); grey with a reason: not comparable, so not judged")


def delta_judgement(delta: float | None, lower_is_better: bool, caveat: str | None,
                    significant: bool | None) -> str:
    """better | worse | same | not comparable | not significant (both renderers' word
    for a delta; "" without one)."""
    if delta is None:
        return ""
    if caveat:
        return "not comparable"
    if significant is False:
        return "not significant"
    if not delta:
        return "same"
    return "better" if (delta < 0 if lower_is_better else delta > 0) else "worse"


def _delta_html(delta: float | None, lower_is_better: bool, caveat: str | None = None,
                significant: bool | None = None) -> str:
    judgement = delta_judgement(delta, lower_is_better, caveat, significant)
    if not judgement:
        return ""
    text = f"({delta:+.4g})"
    if judgement == "not comparable":
        return (f'<span class="muted" title="{escape(caveat)}">{text}</span> '
                f'<span class="muted">not comparable: {escape(caveat)}</span>')
    if judgement == "not significant":
        return f'<span class="muted" title="the 95% intervals overlap">{text} n.s.</span>'
    css = {"better": "better", "worse": "worse", "same": "muted"}[judgement]
    mark = (' <span class="significant" title="the 95% intervals do not overlap">✱</span>'
            if significant else "")
    return f'<span class="{css}">{text}</span>{mark}'


def _delta_text(delta: float | None, lower_is_better: bool, caveat: str | None, significant: bool | None) -> str:
    judgement = delta_judgement(delta, lower_is_better, caveat, significant)
    if not judgement:
        return ""
    if judgement == "not comparable":
        return f" ({delta:+.4g}, not comparable: {caveat})"
    if judgement == "not significant":
        return f" ({delta:+.4g}, n.s.)"
    return f" ({delta:+.4g}{' ✱' if significant else ''})"


def comparison_markdown(comparison: dict[str, Any]) -> str:
    labels = [md_text(run["label"]) for run in comparison["runs"]]
    out = [f"# Comparison: {' vs '.join(labels)}", "",
           f"Generated {format_time(comparison['generated'])}; deltas are against {labels[0]}.", "",
           "## Runs", "", "| run | experiment | directory |", "|---|---|---|"]
    out += [f"| {md_text(r['label'])} | {md_text(r['experiment'])} | {md_code(r['run_dir'])} |"
            for r in comparison["runs"]]
    out += ["", "## Config differences", ""]
    if comparison["config_differences"]:
        out += ["| key | " + " | ".join(labels) + " |", "|---|" + "---|" * len(labels)]
        out += [f"| {md_text(row['key'])} | " + " | ".join(md_text(format_value(v)) for v in row["values"]) + " |"
                for row in comparison["config_differences"]]
    else:
        out.append("The configs are identical (apart from name, workdir and store).")
    out += ["", "## Scores", ""]
    if comparison["metrics"]:
        out += ["| stage / task | metric | " + " | ".join(labels) + " |",
                "|---|---|" + "---:|" * len(labels)]
        for row in comparison["metrics"]:
            count = len(row["values"])
            contexts = row.get("contexts") or [None] * count
            caveats = row.get("caveats") or [None] * count
            significant = row.get("significant") or [None] * count
            cells = [format_value(row["values"][0]) + _chance_text(contexts[0])] + [
                format_value(row["values"][i])
                + _delta_text(row["deltas"][i], row["lower_is_better"], caveats[i], significant[i])
                + _chance_text(contexts[i]) for i in range(1, count)]
            out.append(f"| {md_text(row['group'])} | {md_text(row['metric'])} | "
                       + " | ".join(md_text(cell) for cell in cells) + " |")
        out += ["", DELTA_LEGEND + "."]
    else:
        out.append("No scores yet.")
    return "\n".join(out) + "\n"
