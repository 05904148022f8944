"""`pretrain report RUN_DIR [RUN_DIR...] [-o DIR]`: a report of one run, or several side by side.

Every RUN_DIR is read before anything is written, so a wrong path writes nothing.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from stages.report import RunSource
from views.run_source import load_run_source

DEFAULT_PARENT = Path("reports")


def write_comparison(run_dirs: list[str], output: str | None = None) -> Path:
    """Writes report.html, report.md and comparison.json; returns the output directory.
    Raises ConfigError (nothing written) if a RUN_DIR is not a run."""
    sources = [load_run_source(run_dir) for run_dir in run_dirs]
    output_dir = Path(output) if output else default_output_dir(sources)
    html, markdown, data = render_comparison(sources)
    output_dir.mkdir(parents=True, exist_ok=True)
    (output_dir / "report.html").write_text(html, encoding="utf-8")
    (output_dir / "report.md").write_text(markdown, encoding="utf-8")
    (output_dir / "comparison.json").write_text(json.dumps(data, indent=2, default=str) + "\n",
                                                encoding="utf-8")
    return output_dir


def render_comparison(sources: list[RunSource], *, refresh_seconds: int | None = None
                      ) -> tuple[str, str, dict]:
    """(html, markdown, data). One source renders as that run's own report."""
    if len(sources) == 1:
        from stages.report import build_report
        from stages.report import render_html
        from stages.report import render_markdown

        report = build_report(sources[0])
        return (render_html(report, sources[0], refresh_seconds=refresh_seconds),
                render_markdown(report), report)
    from views.comparison import build_comparison
    from views.comparison_render import comparison_html, comparison_markdown

    data = build_comparison(sources)
    return (comparison_html(data, sources, refresh_seconds=refresh_seconds),
            comparison_markdown(data), data)


def default_output_dir(sources: list[RunSource]) -> Path:
    from views.comparison import run_labels

    names = "-".join(re.sub(r"[^A-Za-z0-9_.-]+", "_", label) for label in run_labels(sources))
    return DEFAULT_PARENT / f"compare-{names}"
