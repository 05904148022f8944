"""`report.md`: the Markdown twin of report.html (tables only; curves as a short table).
Every text from a run (names, messages, hosts) goes through md_text / md_code: a Markdown
viewer renders raw HTML, and a `|` would end a table cell."""

from __future__ import annotations

from typing import Any

from stages.finetune.score_context import VERDICTS
from stages.report.content import format_time, inputs_text
from stages.report.evaluation_render import evaluation_markdown
from stages.report.markdown_text import md_code, md_text
from stages.report.mixture import mixture_markdown
from stages.report.numbers import format_stat
from stages.report.samples import samples_markdown
from stages.report.scores import BASELINE_LEGEND, context_cells
from stages.report.summary import summary_items


def render_markdown(report: dict[str, Any]) -> str:
    out = [f"# Experiment {md_text(report['experiment'])}", "",
           f"Generated {format_time(report['generated'])}.", ""]
    items = summary_items(report.get("summary") or {})
    if items:
        out += ["; ".join(f"{md_text(label)}: **{md_text(value)}**" for label, value in items) + ".", ""]
    out += ["## Stages", "", "| stage | state | fingerprint | seconds | key metrics |",
           "|---|---|---|---:|---|"]
    for row in report["stages"]:
        seconds = format_stat("seconds", row["seconds"])
        out.append(f"| {md_text(row['stage'])} | {md_text(row['state'])} | {md_code(row['fingerprint'])} | "
                   f"{seconds} | {md_text(format_metrics(row['metrics']))} |")
    out += ["", "## Skipped, failed or resumed", ""]
    if report.get("problems"):
        out += ["| stage | what | details |", "|---|---|---|"]
        out += [f"| {md_text(p['stage'])} | {md_text(p['kind'])} | {md_text(p['message'])} |"
                for p in report["problems"]]
    else:
        out.append("Nothing: every stage ran in this run and finished.")
    out += ["", "## Fine-tuning", ""]
    if report["finetune"]:
        out += ["| task | metric | value | 95% CI | baseline | vs baseline |", "|---|---|---:|---|---:|---|"]
        contexts = report.get("finetune_context", {})
        for task, metrics in report.get("finetune_tasks", {}).items():
            for metric, value in metrics.items():
                interval, baseline, verdict = context_cells(contexts.get(task, {}).get(metric))
                verdict = verdict if verdict in ("-", VERDICTS["above"]) else f"**{verdict}**"
                out.append(f"| {md_text(task)} | {md_text(metric)} | {value:.4f} | {interval} | {baseline} | "
                           f"{verdict} |")
        out += ["", BASELINE_LEGEND + "."]
        if report.get("glue_average"):
            out += ["", glue_line(report["glue_average"])]
    else:
        out.append("No fine-tuning scores.")
    out += evaluation_markdown(report)
    out += ["", "## Pretraining curve", ""]
    if report["pretrain_curve"]:
        out += ["| step | train loss | validation loss |", "|---:|---:|---:|"]
        for p in report["pretrain_curve"]:
            val = f"{p['val_loss']:.4f}" if p["val_loss"] is not None else "-"
            out.append(f"| {p['step']} | {p['loss']:.4f} | {val} |")
    else:
        out.append("No training metrics found.")
    out += samples_markdown(report)
    out += mixture_markdown(report)
    out += _stats(report.get("stats", {})) + _lineage(report.get("lineage"))
    return "\n".join(out) + "\n"


def glue_line(glue: dict) -> str:
    text = (f"GLUE average over {len(glue['tasks'])} task(s) ({md_text(', '.join(glue['tasks']))}): "
            f"**{glue['score']:.4f}**")
    if glue.get("ci95"):
        interval, baseline, verdict = context_cells(glue)
        text += f" (approximate 95% CI {interval}; baseline {baseline}: {verdict})"
    return text + f". {md_text(glue['rule'])}."


def _stats(stats: dict) -> list[str]:
    out = ["", "## Data", ""]
    if not stats:
        return out + ["No data statistics."]
    for stage, metrics in stats.items():
        out += [f"### {md_text(stage)}", "", "| statistic | value |", "|---|---:|"]
        out += [f"| {md_text(k)} | {md_text(format_stat(k, v))} |" for k, v in metrics.items()]
        out.append("")
    return out


def _lineage(lineage: dict | None) -> list[str]:
    if not lineage:
        return []
    out = ["", "## Lineage", "", "| stage | fingerprint | code version | inputs | start | end | host | this run |",
           "|---|---|---|---|---|---|---|---|"]
    for row in lineage["stages"]:
        inputs = inputs_text(row)
        this_run = "reused from cache" if row["reused"] else ("ran" if row["state"] == "done" else row["state"])
        out.append(f"| {md_text(row['stage'])} | {md_code(row['fingerprint'])} | "
                   f"{md_text(row['code_version'] or '-')} | {md_text(inputs)} | "
                   f"{format_time(row['start_time'])} | {format_time(row['end_time'])} | "
                   f"{md_text(row['host'] or '-')} | {md_text(this_run)} |")
    libraries = [f"pretrain-pipeline git {lineage['git_commit']}"] if lineage.get("git_commit") else []
    libraries += [f"python {lineage['python']}"] if lineage.get("python") else []
    libraries += [f"{k} {v}" for k, v in lineage["libraries"].items()]
    out += ["", "Libraries: " + md_text(", ".join(libraries) or "-")]
    return out


def format_metrics(metrics: dict, limit: int = 6) -> str:
    return ", ".join(f"{k}={format_stat(k, v)}" for k, v in list(metrics.items())[:limit])
