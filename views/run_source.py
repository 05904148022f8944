"""Read a run directory into a `RunSource` the report code renders (used by `pretrain
report` and `pretrain dashboard`): the latest fingerprint of every stage, and for each
whether it is done, failed, started or not run."""

from __future__ import annotations

from pathlib import Path

from pipeline.config import ConfigError
from pipeline.graph import STAGE_NAMES
from pipeline.runner import load_run_index, run_store
from stages.report import RunSource, StageRecord
from stages.yaml_lines import parse_yaml
from storage.artifact_store import ArtifactStore, open_store
from storage.urls import is_url


SMALL_FILE_BYTES = 16 << 20  # what a report reads of an object-store run: metrics, plots, HTML


def load_run_source(run_dir: str | Path) -> RunSource:
    """Raises ConfigError (exit 2 in the CLI) when `run_dir` is not a run directory.
    An object-store run (s3://...) is read through this machine's mirror of it: its
    index, config and each finished stage's small files are downloaded first."""
    if is_url(run_dir):
        index = load_run_index(str(run_dir))
        store = run_store(str(run_dir), index)
        mirror = open_store(str(run_dir)).workdir
        stages = [_stage_record(store, name, index.get("stages", {}).get(name, "")) for name in STAGE_NAMES]
        return _with_state(RunSource(name=index.get("name") or str(run_dir).rstrip("/").rsplit("/", 1)[-1],
                                     config=_resolved_config(mirror), stages=stages,
                                     run_started=index.get("updated"), run_dir=mirror), index, store)
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise ConfigError(f"{run_dir} does not exist; pass a run directory such as runs/<name> "
                          f"(the experiment's workdir)")
    index = load_run_index(run_dir)
    store = run_store(run_dir, index)
    stages = [_stage_record(store, name, index.get("stages", {}).get(name, "")) for name in STAGE_NAMES]
    return _with_state(RunSource(name=index.get("name") or run_dir.name, config=_resolved_config(run_dir),
                                 stages=stages, run_started=index.get("updated"), run_dir=run_dir.resolve()),
                       index, store)


def _with_state(source: RunSource, index: dict, store: ArtifactStore) -> RunSource:
    """The run's state and its stages' (running, interrupted, not selected, ...), so the
    report and the dashboard say what `status` says."""
    from pipeline.run_state import state_of_source

    state = state_of_source(source, index, store)
    source.state = state.state
    source.stage_states = {stage.stage: stage.state for stage in state.stages}
    return source


def _stage_record(store: ArtifactStore, name: str, fingerprint: str) -> StageRecord:
    if not fingerprint:
        return StageRecord(stage=name, state="not run")
    directory = store.stage_dir(name, fingerprint)
    manifest = store.manifest(name, fingerprint)
    if manifest and store.url:
        directory = store.fetch(name, fingerprint, max_file_bytes=SMALL_FILE_BYTES)
    if manifest:
        return StageRecord(name, "done", fingerprint, manifest, directory)
    failure = store.failure(name, fingerprint)
    if failure:
        return StageRecord(name, "failed", fingerprint, None, directory, failure.get("error"))
    if directory.is_dir():
        # No manifest yet: running now or interrupted. Its metrics.jsonl is still read,
        # which is what lets the dashboard draw curves of a run in progress.
        return StageRecord(name, "incomplete", fingerprint, None, directory)
    return StageRecord(name, "not run", fingerprint)


def _resolved_config(run_dir: Path) -> dict:
    path = run_dir / "config.resolved.yaml"
    try:
        # The hardened reader: a run folder handed to `report` may come from anyone.
        loaded, _ = parse_yaml(path.read_text(encoding="utf-8"), str(path))
    except (OSError, ValueError):
        return {}
    return loaded if isinstance(loaded, dict) else {}
