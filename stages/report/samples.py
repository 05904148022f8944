"""The pretrain stage's samples (`samples.jsonl`, pretrain.samples) in the report and the
dashboard: one table per sampled step, so a reader sees the text improve with training.

    steps = read_samples(pretrain_dir)    # content.py: report["samples"]
    samples_html(report), samples_markdown(report)

A long run samples at many steps: the first, the last and evenly spaced ones between
them are shown (MAX_STEPS_SHOWN in all); samples.jsonl holds every one. Every piece of
text the model wrote goes through `escape` (HTML) or `md_text` (Markdown): it is
arbitrary text, and a `<script>` in it must stay text.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from stages.report.html_parts import escape, table
from stages.report.markdown_text import md_text

SAMPLES_FILE = "samples.jsonl"  # stages/pretrain/samples.py writes it
MAX_STEPS_SHOWN = 6


def read_samples(directory: Path | None) -> dict[str, Any] | None:
    """{"steps": [{"step", "tokens_seen", "rows": [line, ...]}, ...] (at most
    MAX_STEPS_SHOWN, in step order), "num_steps": every sampled step, "settings"} of
    `directory/samples.jsonl`; None when there is none. A torn last line (a run killed
    mid-write, or one being written) is left out."""
    path = Path(directory) / SAMPLES_FILE if directory is not None else None
    if path is None or not path.is_file():
        return None
    by_step: dict[int, list[dict[str, Any]]] = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(record, dict) and isinstance(record.get("step"), int):
                by_step.setdefault(record["step"], []).append(record)
    if not by_step:
        return None
    steps = sorted(by_step)
    shown = [steps[round(i * (len(steps) - 1) / (MAX_STEPS_SHOWN - 1))] for i in range(MAX_STEPS_SHOWN)] \
        if len(steps) > MAX_STEPS_SHOWN else steps
    last = by_step[steps[-1]]
    return {"num_steps": len(steps), "settings": last[0].get("settings", {}),
            "steps": [{"step": step, "tokens_seen": by_step[step][0].get("tokens_seen"),
                       "rows": [_row(r) for r in by_step[step]]} for step in dict.fromkeys(shown)]}


def _row(record: dict[str, Any]) -> dict[str, Any]:
    row = {key: str(record.get(key, "")) for key in ("prompt", "text")}
    if "reference" in record:
        row["reference"] = str(record["reference"])
    if isinstance(record.get("candidates"), list):  # bert: the likeliest tokens at each [MASK]
        row["candidates"] = "; ".join(
            ", ".join(f"{c.get('token')} {c.get('probability', 0):.2f}" for c in mask if isinstance(c, dict))
            for mask in record["candidates"] if isinstance(mask, list))
    return row


def _columns(steps: list[dict[str, Any]]) -> list[str]:
    present = {key for step in steps for row in step["rows"] for key in row}
    return ["prompt", "text"] + [key for key in ("reference", "candidates") if key in present]


def _heading(step: dict[str, Any]) -> str:
    tokens = step.get("tokens_seen")
    return f"Step {step['step']}" + (f" ({tokens:,} tokens)" if isinstance(tokens, int) else "")


def _summary(samples: dict[str, Any]) -> str:
    shown, total = len(samples["steps"]), samples["num_steps"]
    settings = ", ".join(f"{k} {v}" for k, v in samples["settings"].items())
    which = f"{shown} of the {total} sampled steps" if shown < total else f"{total} sampled step(s)"
    return f"Text from the model during pretraining, {which} ({settings or 'default settings'}); " \
           f"every one is in the pretrain stage's {SAMPLES_FILE}."


def samples_html(report: dict[str, Any]) -> str:
    samples = report.get("samples")
    if not samples:
        return "<p>No samples (set pretrain.samples.prompts to see the model's text during training).</p>"
    columns = _columns(samples["steps"])
    parts = [f'<p class="muted">{escape(_summary(samples))}</p>']
    for step in samples["steps"]:
        parts.append(f"<h3>{escape(_heading(step))}</h3>")
        parts.append(table(columns, [[row.get(c, "") for c in columns] for row in step["rows"]],
                           css_class="samples"))
    return "\n".join(parts)


def samples_markdown(report: dict[str, Any]) -> list[str]:
    out = ["", "## Samples", ""]
    samples = report.get("samples")
    if not samples:
        return out + ["No samples."]
    columns = _columns(samples["steps"])
    out += [md_text(_summary(samples))]
    for step in samples["steps"]:
        out += ["", f"### {md_text(_heading(step))}", "", "| " + " | ".join(columns) + " |",
                "|" + "---|" * len(columns)]
        out += ["| " + " | ".join(md_text(row.get(c, "")) for c in columns) + " |" for row in step["rows"]]
    return out
