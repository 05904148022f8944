"""Every run under a root as one table: sweep.html and sweep.md (`pretrain report ROOT`,
the end of `pretrain sweep`), and the data `pretrain dashboard ROOT` serves live.

    write_runs_report("runs/lr-sweep")   # -> runs/lr-sweep/sweep.html, runs/lr-sweep/sweep.md

Runs are found afresh on every call (`pipeline.run_discovery`), so a sweep point that
started since the last call shows up; `run_dirs` names them instead (an object-store
sweep's points, s3://... URLs, which no folder listing finds). A run that cannot be read
(its pipeline.json being replaced, a stage folder removed) is listed as a problem above
the table instead of failing the page.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from pipeline.config import ConfigError
from pipeline.run_discovery import find_run_dirs
from pipeline.run_state import state_of_source
from pipeline.runner import load_run_index, run_store
from stages.report import RunSource
from storage.urls import is_url
from views.run_source import load_run_source
from views.run_table import build_run_table
from views.run_table_render import run_table_html, run_table_markdown, scaling_parts

HTML_FILE = "sweep.html"
MARKDOWN_FILE = "sweep.md"


def write_runs_report(root: str | Path, output_dir: str | Path | None = None, *,
                      run_dirs: list[str] | None = None) -> tuple[Path, Path]:
    """Writes sweep.html and sweep.md (into `root` unless `output_dir`); returns their paths.
    Raises ConfigError (nothing written) when `root` holds no run."""
    html, markdown, _ = render_runs(root, run_dirs=run_dirs)
    output_dir = Path(output_dir) if output_dir is not None else Path(root)
    output_dir.mkdir(parents=True, exist_ok=True)
    html_path, markdown_path = output_dir / HTML_FILE, output_dir / MARKDOWN_FILE
    html_path.write_text(html, encoding="utf-8")
    markdown_path.write_text(markdown, encoding="utf-8")
    return html_path, markdown_path


def render_runs(root: str | Path, *, poll_seconds: float | None = None,
                scaling: Callable[[list[RunSource]], tuple[str, str]] = scaling_parts,
                run_dirs: list[str] | None = None) -> tuple[str, str, dict[str, Any]]:
    """(html, markdown, table) of every run under `root` (or of `run_dirs`) as they are
    now; `poll_seconds`: the page polls runs.json that often (served by the dashboard)."""
    table, scaling_markdown = runs_table(root, scaling=scaling, run_dirs=run_dirs)
    return (run_table_html(table, poll_seconds=poll_seconds),
            run_table_markdown(table, scaling_markdown=scaling_markdown), table)


def runs_table(root: str | Path, *, scaling: Callable[[list[RunSource]], tuple[str, str]] = scaling_parts,
               run_dirs: list[str] | None = None, **options: Any) -> tuple[dict[str, Any], str]:
    """(the table with its "scaling_html", the scaling section as Markdown); `scaling`
    draws that section (the dashboard passes a ScalingCache); `options` go to build_run_table."""
    local_root = None if is_url(root) else Path(root)  # an object-store sweep: its URL
    sources, states, problems = load_runs(local_root, run_dirs)
    table = build_run_table(sources, root=local_root, states=states, problems=problems, **options)
    if local_root is None:
        table["root"] = str(root)
    _show_urls(table, run_dirs or [])
    table["scaling_html"], scaling_markdown = scaling(sources)
    return table, scaling_markdown


class ScalingCache:
    """`scaling_parts`, drawn again only when a run's stages change: its plots take
    seconds to draw and the dashboard's page asks every few seconds."""

    def __init__(self) -> None:
        self.key: tuple | None = None
        self.parts = ("", "")

    def __call__(self, sources: list[RunSource]) -> tuple[str, str]:
        key = tuple((str(s.run_dir), tuple((r.stage, r.state, r.fingerprint, (r.manifest or {}).get("end_time"))
                                           for r in s.stages)) for s in sources)
        if key != self.key:
            self.parts, self.key = scaling_parts(sources), key
        return self.parts


def _show_urls(table: dict[str, Any], run_dirs: list[str]) -> None:
    """An object-store run is read through this machine's mirror of it: show its URL,
    not the mirror, in the directory column."""
    from storage.mirror import mirror_dir

    urls = {str(mirror_dir(str(location))): str(location) for location in run_dirs if is_url(location)}
    for row in table["rows"]:
        if row["run_dir"] in urls:
            row["values"]["directory"] = urls[row["run_dir"]]


def load_runs(root: Path | None, run_dirs: list[str] | None = None
              ) -> tuple[list[RunSource], dict[Path, dict[str, Any]], list[dict[str, str]]]:
    """(the runs under `root` or in `run_dirs`, each one's state by run_dir
    (`judge_state`), runs that could not be read)."""
    sources, states, problems = [], {}, []
    for run_dir in (find_run_dirs(root) if run_dirs is None else run_dirs):
        try:
            source = load_run_source(run_dir)
            states[source.run_dir] = judge_state(source, run_dir)
        except (ConfigError, OSError, ValueError) as error:  # being rewritten, or damaged
            problems.append({"run_dir": str(run_dir), "error": f"{type(error).__name__}: {error}"})
            continue
        sources.append(source)
    return sources, states, problems


def judge_state(source: RunSource, location: str | Path, now: float | None = None) -> dict[str, Any]:
    """{state, wall_seconds, stages, not_selected} of a run (pipeline.run_state: a driver
    holding one of its stage locks is running; what the run did not select is not
    pending). `location`: where the run lives (an object-store run's URL; source.run_dir
    is then this machine's mirror of it)."""
    index = load_run_index(location)
    state = state_of_source(source, index, run_store(location, index))
    return {"state": state.state, "wall_seconds": state.wall_seconds(now),
            "stages": {s.stage: s.state for s in state.stages}, "not_selected": list(state.not_selected)}
