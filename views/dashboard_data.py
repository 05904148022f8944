"""What `pretrain dashboard ROOT` sends its page, kept small for 200 runs of 20,000 steps.

A poll (POST /runs.json) carries the table's tag from the last answer and, for each run
whose curves are shown, the epoch and cursor of the points it holds and the metrics it
draws. The answer holds the table only when it changed (the running runs' wall time is
left out of the tag: the page extrapolates it) and, per run, only the points logged after
the cursor (`views.run_series`). Config values every run shares are sent once
("config_common"), not once per row.

Per run, the report the scores come from is built again only when a stage changes (it
reads the whole metrics.jsonl), and the series are read incrementally: a poll of runs
that gained 10 steps each parses 10 lines per run.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from pipeline.config import ConfigError
from pipeline.run_discovery import find_run_dirs
from stages.report import (
    RunSource,
    finetune_scores,
    glue_average,
    group_by_task,
    read_evaluation,
    score_contexts,
)
from storage.urls import is_url
from views.run_series import RunSeries, samples_per_step
from views.run_table import pretrain_config
from views.runs_report import runs_table

EMPTY_ROOT_NOTE = "no run under {root} yet; this page shows each one as it starts"


class RunsData:
    """The runs under one root as the page polls them; call under one lock."""

    def __init__(self, root: str | Path, *, scaling, root_runs) -> None:
        self.root = root
        self.scaling = scaling        # the scaling section, drawn again only when a stage changes
        self.root_runs = root_runs    # () -> a bucket sweep's points, None for a folder
        self.reports: dict[str, tuple[tuple, dict]] = {}
        self.sources: dict[str, RunSource] = {}
        self.series: dict[str, RunSeries] = {}

    def table(self) -> dict[str, Any]:
        """The table as the page reads it: no series, shared config values once, a tag."""
        run_dirs = self.root_runs()
        if run_dirs is None and not is_url(self.root):
            try:
                run_dirs = [str(d) for d in find_run_dirs(self.root)]
            except ConfigError:  # an empty sweep root, or one not made yet: wait for runs
                run_dirs = []
        self.sources = {}
        table, _ = runs_table(self.root, scaling=self.scaling, run_dirs=run_dirs,
                              report_of=self._report, with_series=False)
        if not table["rows"]:
            table["note"] = EMPTY_ROOT_NOTE.format(root=self.root)
        present = set(self.sources)
        for gone in [d for d in self.series if d not in present]:
            del self.series[gone]
        return tag(compact_config(table))

    def poll(self, request: dict[str, Any]) -> dict[str, Any]:
        """The answer to a poll: {"etag", "generated", "table"?, "series": {run_dir: ...}}."""
        table = self.table()
        answer: dict[str, Any] = {"etag": table["etag"], "generated": table["generated"]}
        if request.get("table") != table["etag"]:
            answer["table"] = table
        wants = request.get("series")
        answer["series"] = self.series_after(wants) if isinstance(wants, dict) else {}
        return answer

    def series_after(self, wants: dict[str, Any]) -> dict[str, Any]:
        """Per run asked for ({"epoch", "after", "metrics", "full"}): the points of
        `metrics` after the cursor and every point of `full` (metrics newly drawn); all
        of them, with "reset", when the client's epoch is not the run's."""
        answer = {}
        for run_dir, want in wants.items():
            source = self.sources.get(run_dir)
            if source is None or not isinstance(want, dict):
                continue
            series = self.series.setdefault(run_dir, RunSeries())
            pretrain, finetune = source.stage("pretrain"), source.stage("finetune")
            series.update(pretrain.directory if pretrain else None, finetune.directory if finetune else None)
            metrics, full = _names(want.get("metrics")), _names(want.get("full"))
            per_step = samples_per_step(pretrain_config(source))
            after = want.get("after") if isinstance(want.get("after"), int) else 0
            if want.get("epoch") != series.epoch:
                payload = series.payload(metrics + full, samples_per_step=per_step)
                payload["reset"] = True
            else:
                payload = series.payload(metrics, after=after, samples_per_step=per_step)
                payload["metrics"].update(series.payload(full, samples_per_step=per_step)["metrics"])
            answer[run_dir] = payload
        return answer

    def _report(self, source: RunSource) -> dict:
        """The scores of the run (`table_report`), read again only when a stage changed."""
        run_dir = str(source.run_dir)
        self.sources[run_dir] = source
        key = tuple((s.stage, s.state, s.fingerprint, (s.manifest or {}).get("end_time"), s.error)
                    for s in source.stages)
        cached = self.reports.get(run_dir)
        if cached is None or cached[0] != key:
            cached = self.reports[run_dir] = (key, table_report(source))
        return cached[1]


def table_report(source: RunSource) -> dict[str, Any]:
    """The parts of `stages.report.content.build_report` the run table reads (its scores:
    `comparison.metric_rows`), made the same way but without reading metrics.jsonl and
    samples.jsonl: for 200 runs of 20,000 steps that read took most of a minute."""
    finetune = source.stage("finetune")
    metrics = finetune.metrics if finetune else {}
    tasks = group_by_task(finetune_scores(metrics))
    contexts = score_contexts(metrics, tasks)
    return {"finetune": finetune_scores(metrics), "finetune_context": contexts,
            "glue_average": glue_average(tasks, contexts), "evaluation": read_evaluation(source.stage("evaluate"))}


def compact_config(table: dict[str, Any]) -> dict[str, Any]:
    """Config values that every row shares move to table["config_common"]; a row keeps
    only its own (the page merges them back). 200 runs of one sweep share all but a few."""
    rows = table["rows"]
    if not rows:
        table["config_common"] = {}
        return table
    common = dict(rows[0]["config"])
    for row in rows[1:]:
        for key in [k for k in common if k not in row["config"] or row["config"][k] != common[k]]:
            del common[key]
    for row in rows:
        row["config"] = {k: v for k, v in row["config"].items() if k not in common}
    table["config_common"] = common
    return table


def tag(table: dict[str, Any]) -> dict[str, Any]:
    """table["etag"]: a digest of everything but the time it was made; a running run's
    wall time (it grows every second) enters as the time it started."""
    generated = table["generated"]
    rows = []
    for row in table["rows"]:
        values = dict(row["values"])
        wall = values.get("wall_seconds")
        if values.get("state") == "running" and isinstance(wall, (int, float)):
            values["wall_seconds"] = ("started", round(generated - wall))
        rows.append({**row, "values": values})
    stable = {**table, "generated": None, "rows": rows}
    table["etag"] = hashlib.sha1(json.dumps(stable, sort_keys=True, default=str).encode()).hexdigest()[:16]
    return table


def _names(value: Any) -> list[str]:
    return [str(v) for v in value] if isinstance(value, list) else []
