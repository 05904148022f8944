"""The report stage: `report.html`, `report.md` and `metrics.json` from the upstream stages.

Reads only manifests and metrics.jsonl files (`stages.report.sources`), so it runs in the
driver in about a second. What goes in: `stages.report.content`; how it looks:
`html_report` (tables and embedded PNG plots, no external files) and `markdown`.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from stages.report.content import build_report
from stages.report.html_report import render_html
from stages.report.markdown import render_markdown
from stages.report.sources import RunSource, source_from_context

if TYPE_CHECKING:
    from stages.context import StageContext

__all__ = ["run", "write_report", "render_markdown"]


def run(ctx: "StageContext") -> dict:
    report = write_report(source_from_context(ctx), ctx.output_dir, curve_points=ctx.config.curve_points)
    return {"stages_reported": len(report["stages"]),
            **{f"finetune/{k}": v for k, v in report["finetune"].items()}}


def write_report(source: RunSource, output_dir, *, curve_points: int = 10,
                 refresh_seconds: int | None = None) -> dict:
    """Write the three report files for `source` into `output_dir`; returns the content."""
    report = build_report(source, curve_points=curve_points)
    (output_dir / "metrics.json").write_text(json.dumps(report, indent=2, default=str) + "\n",
                                             encoding="utf-8")
    (output_dir / "report.md").write_text(render_markdown(report), encoding="utf-8")
    (output_dir / "report.html").write_text(render_html(report, source, refresh_seconds=refresh_seconds),
                                            encoding="utf-8")
    return report
