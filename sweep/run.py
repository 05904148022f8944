"""`pretrain sweep CONFIG`: plan and run every point of a sweep.

Each point is an ordinary `pretrain run` of its own config (a child process: its own
log, Ctrl-C and failure handling, exactly as when run by hand), joined to one Ray
instance that the sweep starts once (or the cluster `ray.address` names). All points
write their stage outputs into one store, so a stage whose fingerprint several points
share is one directory, computed once:

1. Shared stages first: every stage that two or more unfinished points share and that is
   not cached runs once, in one child, before the points start (a point that has to wait
   for another's stage would hold a concurrency slot doing nothing).
2. Then the points, at most `max_concurrent` at a time. Each child still takes the stage
   locks with --wait-lock, so whatever they share beyond step 1 is written once too.
3. Then `sweep.html` and `sweep.md` in the sweep root: one row per point.

A sweep resumes like a run: the same command again skips finished points (every stage
cached) and re-runs the others, whose stages resume from their checkpoints.
`<root>/sweep.json` records each point's state, for `pretrain dashboard` and for people.

Stopping: Ctrl-C or SIGTERM to the driver stops the running children as Ctrl-C stops a
`pretrain run` and exits 130 or 143; a driver killed outright (SIGKILL) cannot stop
anything, and each child stops by itself (sweep/children.py says how).

With an object-store root (workdir: s3://...), the points and the store are URLs under
it; sweep.json, the logs and the summary are written in this machine's mirror of the
root and copied to the same names under the URL each time they change
(`Sweep.publish`), so another machine reads the sweep's state from the bucket.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from pipeline.config import ConfigError
from pipeline.fingerprint import HASH_CACHE, fingerprint_of, stage_identity
from pipeline.graph import STAGES, STAGE_NAMES
from pipeline.input_files import InputHasher
from pipeline.interrupts import interrupted_exit_code, sigterm_as_ctrl_c
from pipeline.planner import Decision, Selection, plan
from storage.local_store import read_json_object, write_json_atomic
from sweep.children import POINT_LOG, PointRunner, SHARED_LOG
from sweep.expand import SWEEP_INDEX, Sweep, SweepPoint



@dataclass(frozen=True)
class StageUse:
    """One stage output of the sweep and the points that read it."""

    stage: str
    fingerprint: str
    points: tuple[str, ...]
    action: str  # the planner's decision: cached / run / missing


def stage_uses(sweep: Sweep, decisions: dict[str, list[Decision]]) -> list[StageUse]:
    """Every (stage, fingerprint) of the sweep, in graph order, with its points."""
    uses: dict[tuple[str, str], list[str]] = {}
    actions: dict[tuple[str, str], str] = {}
    for point in sweep.points:
        for decision in decisions[point.name]:
            key = (decision.stage, decision.fingerprint)
            uses.setdefault(key, []).append(point.name)
            actions[key] = decision.action
    order = {name: i for i, name in enumerate(STAGE_NAMES)}
    return [StageUse(stage, fp, tuple(points), actions[(stage, fp)])
            for (stage, fp), points in sorted(uses.items(), key=lambda item: order[item[0][0]])]


def plan_sweep(sweep: Sweep, selection: Selection = Selection()
               ) -> tuple[dict[str, list[Decision]], list[StageUse]]:
    """Every point's plan. Writes nothing. The points read the same input files: each is
    hashed once for the whole sweep (a hasher per point hashed the corpus once per point)."""
    hasher = InputHasher(sweep.points[0].config.resolved_workdir / HASH_CACHE if sweep.points else None)
    decisions = {point.name: plan(point.config, selection, fingerprints=_fingerprints(point.config, hasher))
                 for point in sweep.points}
    return decisions, stage_uses(sweep, decisions)


def _fingerprints(config, hasher: InputHasher) -> dict[str, tuple[str, dict]]:
    """pipeline.fingerprint.compute_all with a hasher shared by every point; its cache is
    only read (a plan writes nothing)."""
    out: dict[str, tuple[str, dict]] = {}
    for spec in STAGES:
        identity = stage_identity(spec, config, {n: out[n][0] for n in spec.inputs}, hasher)
        out[spec.name] = (fingerprint_of(identity), identity)
    return out


def format_plan(sweep: Sweep, uses: list[StageUse]) -> list[list[str]]:
    """Rows of `pretrain plan` on a sweep: one per stage output, with who shares it."""
    rows = []
    total = len(sweep.points)
    for use in uses:
        if len(use.points) == total and total > 1:
            who = f"all {total} points"
        elif len(use.points) > 1:
            who = f"{len(use.points)} points: {', '.join(use.points)}"
        else:
            who = use.points[0]
        shared = len(use.points) > 1
        what = {"cached": "cached" + (", reused by each" if shared else ""),
                "run": f"runs once, reused by the other {len(use.points) - 1}" if shared else "runs",
                "missing": "not selected"}[use.action]
        rows.append([use.stage, use.fingerprint, who, what])
    return rows


class SweepIndex:
    """`<root>/sweep.json`, rewritten atomically whenever a point changes state."""

    def __init__(self, sweep: Sweep):
        self.sweep = sweep
        self.path = sweep.root / SWEEP_INDEX
        self.lock = threading.Lock()
        previous = read_json_object(self.path).get("points", [])
        states = {p.get("name"): p for p in previous if isinstance(p, dict)}
        self.data = {
            "name": sweep.name, "config_file": sweep.config_path, "updated": time.time(),
            "store": os.path.relpath(sweep.store, sweep.root),
            "points": [{"name": p.name, "overrides": p.overrides, "workdir": p.name,
                        "state": states.get(p.name, {}).get("state", "pending"),
                        **{k: v for k, v in states.get(p.name, {}).items()
                           if k in ("started", "ended", "wall_seconds", "ran", "reused", "exit_code")}}
                       for p in sweep.points],
        }
        self.save()

    def update(self, name: str, **fields) -> None:
        with self.lock:
            for point in self.data["points"]:
                if point["name"] == name:
                    point.update(fields)
            self.data["updated"] = time.time()
            self.save()

    def save(self) -> None:
        write_json_atomic(self.path, self.data)
        self.sweep.publish(SWEEP_INDEX)


def run_sweep(sweep: Sweep, *, selection: Selection = Selection(), max_concurrent: int | None = None,
              echo=print, python: str = sys.executable) -> int:
    """0 when every point finished, 1 when one failed (the others still run) or a shared
    stage failed (no point runs), 130 on Ctrl-C and 143 on SIGTERM (the running points are
    stopped). `selection` (--only / --from) applies to every point."""
    if selection.force:
        raise ConfigError("pretrain sweep has no --force: a forced stage that points share would "
                          "be rebuilt once per point. Force it in one point (pretrain run "
                          "CONFIG -o ... --force STAGE with that point's overrides), then sweep")
    with sigterm_as_ctrl_c():
        try:
            return _run_sweep(sweep, selection, max_concurrent, echo, python)
        except KeyboardInterrupt:
            code = interrupted_exit_code()
            echo(f"interrupted ({signal.Signals(code - 128).name}): the running points were stopped; "
                 "finished points and committed checkpoints are kept; run the same command to "
                 "resume the sweep")
            return code


def _run_sweep(sweep: Sweep, selection: Selection, max_concurrent: int | None, echo, python: str) -> int:
    sweep.root.mkdir(parents=True, exist_ok=True)
    # Another machine's sweep of this root: its state and logs, so that they go on.
    sweep.fetch_published(SWEEP_INDEX, SHARED_LOG, *(f"{p.name}/{POINT_LOG}" for p in sweep.points))
    decisions, uses = plan_sweep(sweep, selection)
    index = SweepIndex(sweep)
    finished = [p for p in sweep.points if not any(d.action == "run" for d in decisions[p.name])]
    for point in finished:
        echo(f"[{point.name}] finished: every selected stage cached, skipped")
        index.update(point.name, state="done")
    pending = [p for p in sweep.points if p not in finished]
    failed: list[str] = []
    if pending:
        with SweepRay(sweep.points[0].config.ray, echo) as ray_address:
            limit = max_concurrent or sweep.max_concurrent or default_concurrency(pending)
            runner = PointRunner(sweep, index, python, ray_address, echo, _selection_args(selection))
            try:
                shared = _shared_to_run(pending, uses)
                if shared and not runner.run_shared(shared):
                    echo(f"error: a shared stage failed, so no point can run: see "
                         f"{sweep.location(SHARED_LOG)}; fix the cause and run the same command again")
                    return 1
                echo(f"running {len(pending)} point(s), at most {limit} at a time "
                     f"({len(finished)} already finished)")
                results = runner.run_points(pending, limit)
            except KeyboardInterrupt:
                runner.stop()
                raise
            failed = [p.name for p, ok in zip(pending, results) if not ok]
    _write_reports(sweep, echo)
    if failed:
        echo(f"error: {len(failed)} point(s) failed: {', '.join(failed)} (each one's log: "
             f"{sweep.where}/<point>/{POINT_LOG}); the same command retries them")
        return 1
    echo(f"sweep {sweep.name}: {len(sweep.points)} points done in {sweep.where}")
    return 0


def default_concurrency(points: list[SweepPoint]) -> int:
    """As many points as the cluster's CPUs hold, at pretrain.num_workers CPUs each."""
    import ray

    cpus = ray.cluster_resources().get("CPU", 1) if ray.is_initialized() else (os.cpu_count() or 1)
    per_point = max(max(p.config.pretrain.num_workers, p.config.finetune.num_workers) for p in points)
    return max(1, int(cpus // per_point))


def _shared_to_run(pending: list[SweepPoint], uses: list[StageUse]) -> dict[str, list[str]]:
    """representative point -> the stages it runs for everyone (shared by 2+ pending points)."""
    names = {p.name for p in pending}
    shared: dict[str, list[str]] = {}
    for use in uses:
        readers = [p for p in use.points if p in names]
        if use.action == "run" and len(readers) > 1:
            shared.setdefault(readers[0], []).append(use.stage)
    return shared


class SweepRay:
    """One Ray for every point: the cluster ray.address names, or an embedded instance
    this driver starts, whose address the children join (their own start would cost
    each point the seconds Ray takes to come up, and they would compete for the cores)."""

    def __init__(self, ray_config, echo):
        self.ray_config = ray_config
        self.echo = echo
        self.started = False

    def __enter__(self) -> str | None:
        """The address the children join; None when their configs already name it."""
        from pipeline.ray_session import RaySession

        # With ray.address set this only connects: the driver reads the cluster's CPUs.
        session = RaySession(self.ray_config)
        session.ensure_started(self.echo)
        self.started = session.started
        import ray

        return None if self.ray_config.address else ray.get_runtime_context().gcs_address

    def __exit__(self, *exc) -> None:
        if self.started:
            import ray

            ray.shutdown()


def _selection_args(selection: Selection) -> list[str]:
    return ([arg for stage in selection.only for arg in ("--only", stage)]
            + (["--from", selection.from_stage] if selection.from_stage else []))


def _write_reports(sweep: Sweep, echo) -> None:
    from views.runs_report import write_runs_report  # the report code, loaded only at the end

    try:
        # An object-store sweep's points are URLs: named, since no folder listing finds them.
        run_dirs = [sweep.location(p.name) for p in sweep.points] if sweep.root_url else None
        html, markdown = write_runs_report(sweep.root, run_dirs=run_dirs)
        sweep.publish(html.name, markdown.name)
        echo(f"wrote {sweep.location(html.name)} and {sweep.location(markdown.name)}")
    except Exception as error:  # noqa: BLE001 - the points' results stand without the summary
        echo(f"warning: could not write the sweep's summary: {type(error).__name__}: {error}")


