"""A run's state: the one notion `pretrain status`, `plan`, sweep.md/sweep.html and the
dashboard share.

    done         every stage the run selected finished (`--only` / `--from` leave the
                 others out: they are named, never counted as pending)
    running      a driver holds the lock (or the object-store lease) of a selected stage now
    failed       a selected stage recorded failure.json, and nobody is writing it again
    interrupted  stopped without finishing, without a failure and without a live writer
    never run    no pipeline.json, or one whose selected stages never started

A stage's own state is one of STAGE_STATES: done, running, failed, interrupted (its
folder exists without a manifest and nobody writes it), not run, or not selected (not
finished and not part of what the run set out to do). `pretrain status` adds damaged
(a finished stage whose files no longer match its manifest).

What the run selected is pipeline.json's "selected" (pipeline.runner writes it); a run
from before it was recorded selected every stage its index names. The wall time of a
running run counts from its start; once it stops, it is the time its finished stages
took, and stays that.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable

from pipeline.graph import STAGE_NAMES

DONE, RUNNING, FAILED, INTERRUPTED, NEVER_RUN = "done", "running", "failed", "interrupted", "never run"
RUN_STATES = (DONE, RUNNING, INTERRUPTED, FAILED, NEVER_RUN)
NOT_RUN, NOT_SELECTED = "not run", "not selected"
STAGE_STATES = (DONE, RUNNING, FAILED, INTERRUPTED, NOT_RUN, NOT_SELECTED)


@dataclass(frozen=True)
class StageState:
    stage: str
    state: str
    fingerprint: str = ""
    holder: dict | None = None  # the lock holder's record (host, pid, since) of a running stage
    seconds: float | None = None  # a finished stage's wall time


@dataclass(frozen=True)
class RunState:
    state: str
    stages: tuple[StageState, ...] = ()
    selected: tuple[str, ...] = ()
    started: float | None = None  # pipeline.json "updated": when the latest run began
    not_selected: tuple[str, ...] = ()  # unfinished stages the run did not select

    def stage(self, name: str) -> StageState | None:
        return next((s for s in self.stages if s.stage == name), None)

    def wall_seconds(self, now: float | None = None) -> float | None:
        """Running: the time since the run started. Stopped: its finished stages' wall
        times added up, a number that no longer grows."""
        if self.state == RUNNING and self.started:
            return max(0.0, (time.time() if now is None else now) - self.started)
        seconds = [s.seconds for s in self.stages if s.state == DONE and s.seconds is not None]
        return sum(seconds) if seconds else None

    def describe(self) -> str:
        """"done", "done (finetune, evaluate, report not selected)", "running (pretrain)"."""
        if self.state == RUNNING:
            return f"{RUNNING} ({', '.join(s.stage for s in self.stages if s.state == RUNNING)})"
        if self.state == FAILED:
            return f"{FAILED} ({', '.join(s.stage for s in self.stages if s.state == FAILED)})"
        if self.state == DONE and self.not_selected:
            return f"{DONE} ({', '.join(self.not_selected)} not selected)"
        return self.state

    def as_json(self, now: float | None = None) -> dict[str, Any]:
        return {"state": self.state, "selected": list(self.selected), "not_selected": list(self.not_selected),
                "started": self.started, "wall_seconds": self.wall_seconds(now)}


def selected_stages(index: dict) -> tuple[str, ...]:
    """The stages the run set out to finish, in graph order."""
    named = index.get("stages") if isinstance(index.get("stages"), dict) else {}
    recorded = index.get("selected")
    if isinstance(recorded, list):
        return tuple(name for name in STAGE_NAMES if name in recorded)
    return tuple(name for name in STAGE_NAMES if named.get(name))


def classify_stage(stage: str, fingerprint: str, *, finished: bool, holder: Callable[[], dict | None],
                   failed: bool, started: bool, selected: bool, seconds: float | None = None) -> StageState:
    """One stage from what is on disk. `holder` is called only for an unfinished stage (a
    lock probe; an object store's costs a request)."""
    if not fingerprint:
        return StageState(stage, NOT_RUN if selected else NOT_SELECTED)
    if finished:
        return StageState(stage, DONE, fingerprint, seconds=seconds)
    live = holder()
    if live is not None:
        return StageState(stage, RUNNING, fingerprint, holder=live)
    if failed:
        return StageState(stage, FAILED, fingerprint)
    if started:
        return StageState(stage, INTERRUPTED, fingerprint)
    return StageState(stage, NOT_RUN if selected else NOT_SELECTED, fingerprint)


def combine(stages: Iterable[StageState], selected: Iterable[str], *, started: float | None = None) -> RunState:
    """The run's state from its stages' (see the module's docstring for the order)."""
    stages, selected = tuple(stages), tuple(selected)
    chosen = [s for s in stages if s.stage in selected]
    states = {s.state for s in chosen}
    # Left out and not finished: what a `--only` run leaves for later (cached ones are not news).
    not_selected = tuple(s.stage for s in stages if s.stage not in selected and s.state != DONE)
    if RUNNING in states:
        state = RUNNING
    elif chosen and states == {DONE}:
        state = DONE
    elif FAILED in states:
        state = FAILED
    elif states & {DONE, INTERRUPTED}:
        state = INTERRUPTED
    else:
        state = NEVER_RUN
    return RunState(state, stages, selected, started, not_selected)


def read_run_state(run_dir, index: dict | None = None, store=None) -> RunState:
    """The state of the run at `run_dir` (a folder or an object-store URL); NEVER_RUN
    when it has no pipeline.json."""
    from pipeline.config import ConfigError
    from pipeline.runner import load_run_index, run_store

    if index is None:
        try:
            index = load_run_index(run_dir)
        except ConfigError:
            return RunState(NEVER_RUN)
    store = store if store is not None else run_store(run_dir, index)
    selected = selected_stages(index)
    fingerprints = index.get("stages") or {}
    stages = []
    for name in STAGE_NAMES:
        fp = fingerprints.get(name, "")
        manifest = store.manifest(name, fp) if fp else None
        stages.append(classify_stage(
            name, fp, finished=manifest is not None, holder=lambda n=name, f=fp: store.lock_holder(n, f),
            failed=bool(fp) and manifest is None and store.failure(name, fp) is not None,
            started=bool(fp) and store.started(name, fp), selected=name in selected,
            seconds=(manifest or {}).get("wall_seconds")))
    return combine(stages, selected, started=_number(index.get("updated")))


def last_run_note(cfg) -> str:
    """" (last run: done)" for `plan`: the state of the run already in the config's local
    workdir; "" when there is none (an object-store workdir is not read: that would fill
    this machine's mirror, and a plan writes nothing)."""
    from pipeline.config import ConfigError
    from storage.local_store import RUN_INDEX

    if cfg.workdir_url or not (cfg.resolved_workdir / RUN_INDEX).is_file():
        return ""
    try:
        state = read_run_state(cfg.resolved_workdir)
    except (OSError, ValueError, ConfigError):
        return ""
    return "" if state.state == NEVER_RUN else f" (last run: {state.describe()})"


def state_of_source(source, index: dict, store) -> RunState:
    """The state of a run already read for a report (`views.run_source.load_run_source`:
    its stage records say done / failed / incomplete / not run); only the unfinished
    stages' locks are probed."""
    selected = selected_stages(index)
    stages = []
    for record in source.stages:
        seconds = (record.manifest or {}).get("wall_seconds")
        stages.append(classify_stage(
            record.stage, record.fingerprint, finished=record.state == DONE,
            holder=lambda r=record: store.lock_holder(r.stage, r.fingerprint),
            failed=record.state == FAILED, started=record.state == "incomplete",
            selected=record.stage in selected,
            seconds=float(seconds) if isinstance(seconds, (int, float)) else None))
    return combine(stages, selected, started=_number(index.get("updated")))


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
