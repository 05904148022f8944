"""Every run under a root as one table (sweep.html, sweep.md, `pretrain dashboard ROOT`):
a row per run with its state, wall time, the config keys that differ across the runs,
and its scores, each with the baseline the report code knows for it.

The model is plain JSON-ready data: the dashboard serves it as /runs.json and the page
renders it in the browser; sweep.md renders the same rows as Markdown. Scores, deltas
and baselines come from the comparison (`views.comparison.metric_rows`), never
recomputed here.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, Callable, Mapping

from storage.local_store import RUN_INDEX
from stages.report import RunSource, build_report, verdict_label
from views.comparison import IGNORED_CONFIG_KEYS, config_differences, flatten, metric_rows, run_labels
from views.run_series import read_run_series, samples_per_step
from views.run_sweep import swept_keys

FIXED_COLUMNS = (
    {"key": "run", "name": "run", "title": "run", "group": "run", "numeric": False},
    {"key": "directory", "name": "directory", "title": "directory", "group": "run", "numeric": False},
    {"key": "sweep", "name": "sweep", "title": "sweep", "group": "run", "numeric": False},
    {"key": "state", "name": "state", "title": "state", "group": "run", "numeric": False},
    {"key": "wall_seconds", "name": "wall_seconds", "title": "wall time", "group": "run", "numeric": True},
)


def build_run_table(sources: list[RunSource], *, root: Path | None = None,
                    states: Mapping[Path, dict[str, Any]] | None = None,
                    problems: list[dict[str, str]] | None = None, now: float | None = None,
                    report_of: Callable[[RunSource], dict] = build_report, with_series: bool = True
                    ) -> dict[str, Any]:
    """{"generated", "root", "columns", "rows", "problems", "ignored_config_keys"}.

    columns: [{key, name (what a filter's `name=value` matches: state, pretrain.lr,
    pretrain/final_loss, sst2/accuracy, eval/piqa/acc), title, group (run | config |
    pretrain | finetune | evaluate), numeric, lower_is_better, baseline (the one all runs
    share, else None)}]; rows: [{run_dir,
    values: {column key: value}, contexts: {column key: {baseline, verdict, label}},
    stages: {stage: state}, error, config: {dotted key: value}, series: every logged
    metric (`views.run_series`; None when not `with_series`: the dashboard sends
    them incrementally)}]; swept_keys: the config keys a sweep's points override.
    values["state"]: done | running | interrupted | failed | never run; rows also carry
    not_selected: the unfinished stages the run did not select (--only / --from).
    `states`: run_dir -> {state, wall_seconds, stages, not_selected}, the engine's verdict
    (pipeline.run_state, which probes stage locks: this layer cannot; a run missing from it
    is judged by `unprobed_state`); `problems`:
    runs that could not be read ({run_dir, error}), shown above the table; `report_of`:
    the per-run report the scores come from (the dashboard passes a cached one)."""
    now = time.time() if now is None else now
    problems = list(problems or [])
    sources, reports = _reports(sources, problems, report_of)
    labels = run_labels(sources)
    differences = config_differences([s.config for s in sources]) if len(sources) > 1 else []
    metrics = metric_rows(labels, sources, reports) if sources else []
    sweeps = [read_sweep_name(s.run_dir) for s in sources]
    columns = [dict(c) for c in FIXED_COLUMNS if c["key"] != "sweep" or any(sweeps)]
    columns += [_config_column(row) for row in differences]
    columns += [_metric_column(row) for row in metrics]
    rows = []
    for i, (label, source) in enumerate(zip(labels, sources)):
        judged = (states or {}).get(source.run_dir) or unprobed_state(source)
        values = {"run": label, "directory": _display_dir(source.run_dir, root), "sweep": sweeps[i],
                  "state": judged["state"], "wall_seconds": judged["wall_seconds"]}
        contexts = {}
        for row in differences:
            values[f"config:{row['key']}"] = row["values"][i]
        for row in metrics:
            key = _metric_key(row)
            values[key] = row["values"][i]
            if (context := _context(row, i)) is not None:
                contexts[key] = context
        failed = next((s for s in source.stages if s.state == "failed"), None)
        rows.append({"run_dir": str(source.run_dir or ""), "experiment": source.name, "values": values,
                     "contexts": contexts,
                     "stages": judged.get("stages") or {s.stage: s.state for s in source.stages},
                     "not_selected": list(judged.get("not_selected") or ()),
                     "error": f"{failed.stage}: {failed.error or 'failed'}" if failed else None,
                     "config": _jsonable(flatten(source.config)),
                     "series": run_series(source) if with_series else None})
    return {"generated": now, "root": str(root or ""), "columns": columns, "rows": rows,
            "problems": problems, "ignored_config_keys": list(IGNORED_CONFIG_KEYS),
            "swept_keys": swept_keys(sources)}


def unprobed_state(source: RunSource) -> dict[str, Any]:
    """A run's state from its stage records alone, for a caller without the engine's
    (which also probes stage locks: only it can tell running from interrupted)."""
    stages = [s for s in source.stages if s.fingerprint]
    if any(s.state == "failed" for s in stages):
        state = "failed"
    elif stages and all(s.state == "done" for s in stages):
        state = "done"
    elif any(s.state in ("done", "incomplete") for s in stages):
        state = "interrupted"
    else:
        state = "never run"
    seconds = [(s.manifest or {}).get("wall_seconds") for s in stages if s.state == "done"]
    seconds = [float(v) for v in seconds if isinstance(v, (int, float))]
    return {"state": state, "wall_seconds": sum(seconds) if seconds else None}


def read_sweep_name(run_dir: Path | None) -> str | None:
    """The sweep a run is a point of (pipeline.json "sweep"), None for a plain run."""
    if run_dir is None:
        return None
    try:
        sweep = json.loads((Path(run_dir) / RUN_INDEX).read_text(encoding="utf-8")).get("sweep")
    except (OSError, ValueError, AttributeError):
        return None
    return str(sweep) if sweep else None


def run_series(source: RunSource) -> dict[str, Any]:
    """Every metric the run logged (pretrain and finetune metrics.jsonl), thinned."""
    pretrain, finetune = source.stage("pretrain"), source.stage("finetune")
    return read_run_series(pretrain.directory if pretrain else None, finetune.directory if finetune else None,
                           samples_per_step(pretrain_config(source)))


def pretrain_config(source: RunSource) -> dict[str, Any]:
    """The pretrain config the stage ran with (its manifest's), else the run's config's."""
    pretrain = source.stage("pretrain")
    section = ((pretrain.manifest or {}) if pretrain else {}).get("config")
    if not isinstance(section, dict) or not section:
        section = source.config.get("pretrain")
    return section if isinstance(section, dict) else {}


def _reports(sources: list[RunSource], problems: list[dict], report_of: Callable[[RunSource], dict]
             ) -> tuple[list[RunSource], list[dict]]:
    kept, reports = [], []
    for source in sources:
        try:
            reports.append(report_of(source))
        except Exception as error:  # noqa: BLE001 - one unreadable run must not hide the others
            problems.append({"run_dir": str(source.run_dir or source.name),
                             "error": f"{type(error).__name__}: {error}"})
            continue
        kept.append(source)
    return kept, reports


def _config_column(row: dict) -> dict[str, Any]:
    present = [v for v in row["values"] if v is not None]
    return {"key": f"config:{row['key']}", "name": row["key"], "title": row["key"], "group": "config",
            "numeric": bool(present) and all(_is_number(v) for v in present)}


def _metric_key(row: dict) -> str:
    return f"metric:{row['group']}/{row['metric']}"


def _metric_column(row: dict) -> dict[str, Any]:
    group = row["group"]
    if group == "pretrain":
        kind, name = "pretrain", f"pretrain/{row['metric']}"
    elif group.startswith("evaluate: "):
        kind, name = "evaluate", f"eval/{group.removeprefix('evaluate: ')}/{row['metric']}"
    else:
        kind, name = "finetune", f"{group}/{row['metric']}"
    baselines = {round(c["baseline"], 9) for c in row["contexts"] if c and c.get("baseline") is not None}
    return {"key": _metric_key(row), "name": name, "title": name,
            "group": kind, "numeric": True,
            "lower_is_better": row["lower_is_better"],
            "baseline": next(iter(baselines)) if len(baselines) == 1 else None}


def _context(row: dict, i: int) -> dict[str, Any] | None:
    context = row["contexts"][i]
    if not context or context.get("baseline") is None:
        return None
    return {"baseline": context["baseline"], "verdict": context.get("verdict"),
            "label": verdict_label(context) if context.get("verdict") else None}


def _display_dir(run_dir: Path | None, root: Path | None) -> str:
    if run_dir is None:
        return ""
    if root is not None:
        relative = os.path.relpath(run_dir, Path(root).resolve())
        if not relative.startswith(".."):
            return relative
    return str(run_dir)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _jsonable(flat: dict[str, Any]) -> dict[str, Any]:
    """Config values as JSON holds them (a YAML date or set becomes its text)."""
    return json.loads(json.dumps(flat, default=str))
