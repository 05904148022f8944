"""The "Evaluation (zero- and few-shot)" section of report.html and report.md.

One row per task and metric (shots, value, 95% interval, baseline, verdict, examples and
truncated prompts); where the stage scored pretraining snapshots, the scores against
training tokens: plots in HTML (scores on one axis, perplexities on a log axis, bits
per byte on a third), a table in Markdown.
"""

from __future__ import annotations

from typing import Any

from stages.report.evaluation import EVALUATION_LEGEND, format_number, snapshot_lines, verdict_label
from stages.report.html_parts import GroupRow, Raw, escape, plot_figure, table
from stages.report.markdown_text import md_text
from stages.report.plots import line_plot_png

SNAPSHOT_NOTE = "Dashed: each score's baseline; shaded: its 95% interval."
EMPTY = "No zero- or few-shot scores (the evaluate stage has not finished, or evaluate.tasks is empty)."


def score_cells(entry: dict[str, Any], score: dict[str, Any]) -> tuple[str, str, str, str, str]:
    """(shots, value, interval, baseline, examples) as table text; "-" where unknown."""
    shots = "-" if entry.get("shots") is None else str(entry["shots"])
    interval = "-" if not score["ci95"] else " – ".join(format_number(v) for v in score["ci95"])
    baseline = "-" if score["baseline"] is None else format_number(score["baseline"])
    examples = "-" if entry.get("num_examples") is None else str(entry["num_examples"])
    if entry.get("num_truncated"):
        examples += f" ({entry['num_truncated']} truncated)"
    if entry.get("num_skipped"):
        examples += f" ({entry['num_skipped']} not scored: longer than the context)"
    return shots, format_number(score["value"]), interval, baseline, examples


def evaluation_markdown(report: dict[str, Any]) -> list[str]:
    out = ["", "## Evaluation (zero- and few-shot)", ""]
    evaluation = report.get("evaluation") or {}
    if not evaluation:
        return out + [EMPTY]
    out += ["| task | shots | metric | value | 95% CI | baseline | vs baseline | examples |",
            "|---|---:|---|---:|---|---:|---|---:|"]
    for task, entry in evaluation.items():
        for metric, score in entry["scores"].items():
            shots, value, interval, baseline, examples = score_cells(entry, score)
            mark = "-" if not score["verdict"] else verdict_label(score)
            mark = mark if score["verdict"] in (None, "above") else f"**{mark}**"
            if entry.get("unreliable"):
                mark = f"**unreliable: {md_text(entry['unreliable'])}**; {mark}"
            out.append(f"| {md_text(task)} | {shots} | {md_text(_metric_name(metric, score))} | {value} | "
                       f"{interval} | {baseline} | {mark} | {examples} |")
    out += ["", EVALUATION_LEGEND + "."]
    rows = report.get("evaluation_snapshots") or []
    if rows:
        out += _snapshot_markdown(rows)
    return out


def _snapshot_markdown(rows: list[dict[str, Any]]) -> list[str]:
    """One row per task and metric, one column per snapshot (step / training tokens);
    intervals are in metrics.json (evaluation_snapshots) and the HTML report."""
    snapshots = sorted({(row["step"], row["tokens"]) for row in rows})
    values: dict[tuple[str, str], dict[int, dict]] = {}
    for row in rows:
        values.setdefault((row["task"], row["metric"]), {})[row["step"]] = row
    out = ["", "### Across training", "",
           "Each score at each pretraining snapshot (column: step / training tokens); "
           "*≈* marks a score whose interval holds its baseline, *worse* one wholly on the wrong side.", "",
           "| task | metric | " + " | ".join(f"{step} / {tokens:,}" for step, tokens in snapshots) + " | baseline |",
           "|---|---|" + "---:|" * len(snapshots) + "---:|"]
    for (task, metric), by_step in values.items():
        cells = [_snapshot_cell(by_step.get(step)) for step, _ in snapshots]
        baselines = [r["baseline"] for r in by_step.values() if r["baseline"] is not None]
        out.append(f"| {md_text(task)} | {md_text(metric)} | " + " | ".join(cells)
                   + f" | {format_number(baselines[-1]) if baselines else '-'} |")
    return out


def _snapshot_cell(row: dict | None) -> str:
    if row is None:
        return "-"
    mark = {"chance": " *≈*", "below": " *worse*"}.get(row["verdict"] or "", "")
    return format_number(row["value"]) + mark


def evaluation_html(report: dict[str, Any]) -> str:
    evaluation = report.get("evaluation") or {}
    if not evaluation:
        return f"<p>{escape(EMPTY)}</p>"
    rows: list[Any] = []
    for task, entry in evaluation.items():
        rows.append(GroupRow(task if not entry.get("kind") else f"{task} ({entry['kind']})"))
        for metric, score in entry["scores"].items():
            shots, value, interval, baseline, examples = score_cells(entry, score)
            if score.get("baseline_kind"):
                baseline = Raw(f'<span title="{escape(score["baseline_kind"])}">{escape(baseline)}</span>')
            rows.append([task, shots, _metric_name(metric, score), value, interval, baseline,
                         verdict_badge(score, entry.get("unreliable")), examples])
    html = table(["task", "shots", "metric", "value", "95% CI", "baseline", "vs baseline", "examples"], rows,
                 numeric=[1, 3, 4, 5, 7], css_class="evaluation")
    html += f'<p class="muted">{escape(EVALUATION_LEGEND)}.</p>'
    snapshots = report.get("evaluation_snapshots") or []
    if snapshots:
        kinds = {task: entry.get("kind") for task, entry in evaluation.items()}
        html += "<h3>Across training</h3>" + _snapshot_figures(snapshots, kinds) + _snapshot_table(snapshots)
    return html


def verdict_badge(context: dict | None, unreliable: str | None = None) -> Raw:
    """A score's verdict as a badge (a score at or under its baseline is hard to miss);
    a score of an unreliable task (`truncation_problem`) says so first, with the reason."""
    mark = (f'<span class="badge badge-unreliable" title="{escape(unreliable)}">unreliable: '
            f"{escape(unreliable)}</span> ") if unreliable else ""
    if not context or not context.get("verdict"):
        return Raw(mark or "-")
    kind = context["verdict"]
    return Raw(f'{mark}<span class="badge badge-{kind}">{escape(verdict_label(context))}</span>')


def snapshot_title(panel: str, lines: dict[str, dict[str, Any]]) -> str:
    higher = next(iter(lines.values()))["higher_is_better"]
    return f"Evaluation across training: {panel} ({'higher' if higher else 'lower'} is better)"


def snapshot_plots(rows: list[dict[str, Any]], kinds: dict[str, str | None] | None = None
                   ) -> list[tuple[str, str]]:
    """(title, base64 PNG) per panel (`snapshot_lines`): scores against training tokens,
    the legend beside the plot rather than over its lines."""
    plots = []
    for panel, lines in snapshot_lines(rows, kinds).items():
        title = snapshot_title(panel, lines)
        plots.append((title, line_plot_png(
            title, {label: line["points"] for label, line in lines.items()}, xlabel="training tokens",
            log_y=panel.endswith("perplexity"), engineering_x=True, legend_outside=True,
            bands={label: line["bands"] for label, line in lines.items()},
            baselines={label: line["baseline"] for label, line in lines.items() if line["baseline"] is not None})))
    return plots


def _snapshot_figures(rows: list[dict[str, Any]], kinds: dict[str, str | None]) -> str:
    figures = "".join(plot_figure(title, png) for title, png in snapshot_plots(rows, kinds))
    return f'<div class="plots">{figures}</div><p class="muted">{escape(SNAPSHOT_NOTE)}</p>'


def _snapshot_table(rows: list[dict[str, Any]]) -> str:
    cells = [[f"{row['step']:,}", f"{row['tokens']:,}", row["task"], row["metric"], format_number(row["value"]),
              "-" if not row["ci95"] else " – ".join(format_number(v) for v in row["ci95"]),
              "-" if row["baseline"] is None else format_number(row["baseline"]), verdict_badge(row)]
             for row in _by_score(rows)]
    return ("<details><summary>Every snapshot's scores</summary>"
            + table(["step", "tokens", "task", "metric", "value", "95% CI", "baseline", "vs baseline"], cells,
                    numeric=[0, 1, 4, 6], css_class="evaluation-snapshots")
            + "</details>")


def _by_score(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows grouped by task and metric (in the order they first appear), then by step."""
    order: dict[tuple[str, str], int] = {}
    for row in rows:
        order.setdefault((row["task"], row["metric"]), len(order))
    return sorted(rows, key=lambda r: (order[(r["task"], r["metric"])], r["step"]))


def _metric_name(metric: str, score: dict[str, Any]) -> str:
    return metric if score["higher_is_better"] else f"{metric} (lower is better)"
