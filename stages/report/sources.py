"""What a report is made from: one run's config and the state of each of its stages.

The report stage builds a `RunSource` from its StageContext (every upstream stage is
finished there); `pretrain report` and `pretrain dashboard` build one from a run
directory on disk (`views.compare.load_run_source`), where stages may also be failed,
half-done or not run yet. Everything downstream renders a RunSource and nothing else.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from storage.local_store import RUN_INDEX  # written by the engine when a run starts (its `updated` time)


@dataclass
class StageRecord:
    """One stage of a run. state: done | failed | incomplete | not run."""

    stage: str
    state: str
    fingerprint: str = ""
    manifest: dict[str, Any] | None = None
    directory: Path | None = None
    error: str | None = None

    @property
    def metrics(self) -> dict[str, Any]:
        return (self.manifest or {}).get("metrics", {})


@dataclass
class RunSource:
    name: str
    config: dict[str, Any]
    stages: list[StageRecord] = field(default_factory=list)
    # When the latest `pretrain run` of this workdir began; a finished stage that ended
    # before it was reused from the cache (skipped) rather than run again.
    run_started: float | None = None
    run_dir: Path | None = None
    # The run's state and each stage's, by pipeline.run_state (which probes stage locks:
    # only it tells running from interrupted, and a stage `--only` left out from one not
    # run yet); None where no engine read the run (the report stage's own view).
    state: str | None = None
    stage_states: dict[str, str] = field(default_factory=dict)

    def stage(self, name: str) -> StageRecord | None:
        return next((s for s in self.stages if s.stage == name), None)

    @property
    def in_progress(self) -> bool:
        if self.state is not None:
            return self.state == "running"
        return any(s.state in ("incomplete", "not run") for s in self.stages)


def source_from_context(ctx) -> RunSource:
    """The report stage's view: every upstream stage of this fingerprint, finished."""
    stages = [
        StageRecord(stage=name, state="done" if manifest else "not run",
                    fingerprint=(manifest or {}).get("fingerprint", ""), manifest=manifest,
                    directory=Path(ctx.inputs[name]) if name in ctx.inputs else None)
        for name, manifest in ctx.input_manifests.items()
    ]
    workdir = Path(ctx.experiment.resolved_workdir)
    return RunSource(name=ctx.experiment.name, config=ctx.experiment.model_dump(mode="json"),
                     stages=stages, run_started=read_run_started(workdir), run_dir=workdir)


def read_run_started(workdir: Path) -> float | None:
    try:
        return float(read_run_index(workdir)["updated"])
    except (KeyError, TypeError, ValueError):
        return None  # no index (a stage called from a test): nothing counts as skipped


def read_run_index(workdir: Path) -> dict[str, Any]:
    """The run's pipeline.json ({} where it is missing or unreadable)."""
    try:
        index = json.loads((Path(workdir) / RUN_INDEX).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return index if isinstance(index, dict) else {}
