"""`report.html`: one run as a self-contained page (tables plus embedded PNG plots)."""

from __future__ import annotations

import json
from typing import Any

from stages.finetune.score_context import VERDICTS
from stages.report.content import format_time, inputs_text
from stages.report.curves import Series, finetune_series, panels, pretrain_series
from stages.report.evaluation_render import evaluation_html
from stages.report.html_parts import GroupRow, Raw, escape, page, plot_figure, table
from stages.report.mixture import mixture_html
from stages.report.numbers import format_stat
from stages.report.plots import line_plot_png
from stages.report.samples import samples_html
from stages.report.scores import BASELINE_LEGEND, context_cells
from stages.report.sources import RunSource
from stages.report.summary import summary_items


def render_html(report: dict[str, Any], source: RunSource, *,
                refresh_seconds: int | None = None) -> str:
    sections = [
        f"<h1>Experiment <code>{escape(report['experiment'])}</code></h1>",
        f'<p class="muted">Generated {escape(format_time(report["generated"]))}'
        + (" &middot; run in progress, this page refreshes itself" if refresh_seconds else "")
        + "</p>",
        _summary(report),
        "<h2>Stages</h2>", _stages_table(report),
        "<h2>Skipped, failed or resumed</h2>", _problems(report),
        "<h2>Training curves</h2>", _plots(run_plots(source)),
        "<h2>Samples</h2>", samples_html(report),
        mixture_html(report),
        "<h2>Fine-tuning</h2>", _finetune_table(report),
        "<h2>Evaluation (zero- and few-shot)</h2>", evaluation_html(report),
        "<h2>Data</h2>", _stats(report),
        "<h2>Lineage</h2>", _lineage(report),
    ]
    return page(f"{report['experiment']} report", "\n".join(sections), refresh_seconds=refresh_seconds)


def run_plots(source: RunSource) -> list[tuple[str, str]]:
    """(title, base64 PNG) for pretraining panels and the fine-tuning loss per task."""
    pretrain = source.stage("pretrain")
    finetune = source.stage("finetune")
    plots = [(f"Pretraining: {title.lower()}", lines)
             for title, lines in panels(pretrain_series(pretrain.directory if pretrain else None)).items()]
    by_task = finetune_series(finetune.directory if finetune else None)
    task_losses: Series = {task: series["loss"] for task, series in by_task.items() if "loss" in series}
    if task_losses:
        plots.append(("Fine-tuning: training loss per task", task_losses))
    return [(title, line_plot_png(title, lines)) for title, lines in plots]


def _plots(plots: list[tuple[str, str]]) -> str:
    if not plots:
        return "<p>No training metrics yet.</p>"
    return '<div class="plots">' + "".join(plot_figure(title, png) for title, png in plots) + "</div>"


def _stages_table(report: dict) -> str:
    rows = [[row["stage"], Raw(f'<span class="state-{escape(row["state"].replace(" ", "-"))}">'
                               f'{escape(row["state"])}</span>'),
             Raw(f"<code>{escape(row['fingerprint'])}</code>"),
             format_stat("seconds", row["seconds"]),
             _metrics_text(row["metrics"])] for row in report["stages"]]
    return table(["stage", "state", "fingerprint", "seconds", "key metrics"], rows, numeric=[3],
                 css_class="stages")


def _summary(report: dict) -> str:
    items = summary_items(report.get("summary") or {})
    if not items:
        return ""
    cells = "".join(f'<div><span class="label">{escape(label)}</span><b>{escape(value)}</b></div>'
                    for label, value in items)
    return f'<div class="summary">{cells}</div>'


def _problems(report: dict) -> str:
    if not report["problems"]:
        return "<p>Nothing: every stage ran in this run and finished.</p>"
    rows = [[p["stage"], Raw(f'<span class="kind-{escape(p["kind"].replace(" ", "-"))}">'
                             f'{escape(p["kind"])}</span>'), p["message"]] for p in report["problems"]]
    return table(["stage", "what", "details"], rows, css_class="problems")


def _finetune_table(report: dict) -> str:
    tasks = report["finetune_tasks"]
    if not tasks:
        return "<p>No fine-tuning scores.</p>"
    contexts = report.get("finetune_context", {})
    rows: list[Any] = []
    for task, metrics in tasks.items():
        rows.append(GroupRow(task))
        for metric, value in metrics.items():
            context = contexts.get(task, {}).get(metric)
            interval, baseline, _ = context_cells(context)
            rows.append([task, metric, value, interval, baseline, _verdict_badge(context)])
    glue = report.get("glue_average")
    html = table(["task", "metric", "value", "95% CI", "baseline", "vs baseline"], rows, numeric=[2, 3, 4],
                 css_class="finetune")
    html += f'<p class="muted">{escape(BASELINE_LEGEND)}.</p>'
    if glue:
        html += (f"<p>GLUE average over {len(glue['tasks'])} task(s) "
                 f"({escape(', '.join(glue['tasks']))}): <b>{glue['score']:.4f}</b>")
        if glue.get("ci95"):
            interval, baseline, _ = context_cells(glue)
            html += f" (approximate 95% CI {escape(interval)}; baseline {escape(baseline)}: {_verdict_badge(glue)})"
        html += f'. <span class="muted">{escape(glue["rule"])}.</span></p>'
    return html


def _verdict_badge(context: dict | None) -> Raw:
    """above baseline, or a badge that makes a score at (or under) chance hard to miss."""
    if not context:
        return Raw("-")
    kind = context["verdict"]
    return Raw(f'<span class="badge badge-{kind}">{escape(VERDICTS[kind])}</span>')


def _stats(report: dict) -> str:
    if not report["stats"]:
        return "<p>No data statistics.</p>"
    parts = []
    for stage, metrics in report["stats"].items():
        parts.append(f"<h3>{escape(stage)}</h3>")
        parts.append(table(["statistic", "value"], [[k, format_stat(k, v)] for k, v in metrics.items()],
                           numeric=[1], css_class=f"stats stats-{escape(stage)}"))
    return "\n".join(parts)


def _lineage(report: dict) -> str:
    lineage = report["lineage"]
    rows = [[row["stage"], Raw(f"<code>{escape(row['fingerprint'])}</code>"), row["code_version"],
             inputs_text(row),
             format_time(row["start_time"]), format_time(row["end_time"]), row["host"],
             "reused from cache" if row["reused"] else ("ran" if row["state"] == "done" else row["state"])]
            for row in lineage["stages"]]
    libraries = ([["pretrain-pipeline (git commit)", Raw(f"<code>{escape(lineage['git_commit'])}</code>")]]
                 if lineage.get("git_commit") else [])
    libraries += [["python", lineage["python"]]] + [[k, v] for k, v in lineage["libraries"].items()]
    return "\n".join([
        table(["stage", "fingerprint", "code version", "inputs", "start", "end", "host", "this run"],
              rows, css_class="lineage"),
        "<h3>Libraries</h3>", table(["library", "version"], libraries, css_class="libraries"),
        "<h3>Config</h3>",
        f"<pre>{escape(json.dumps(lineage['config'], indent=2, sort_keys=False, default=str))}</pre>",
    ])


def _metrics_text(metrics: dict) -> str:
    return ", ".join(f"{k}={format_stat(k, v)}" for k, v in list(metrics.items())[:8])
