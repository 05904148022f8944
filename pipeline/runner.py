"""Run the stages a plan selects, each to a manifest or to a clear failure.

The runner starts (or connects to) Ray only when a stage that needs it actually runs:
a fully cached rerun never starts Ray.
"""

from __future__ import annotations

import os
import platform
import socket
import sys
import time
import traceback
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

import yaml

from pipeline.config import ConfigError, ExperimentConfig
from pipeline.context import StageContext
from pipeline.fingerprint import compute_all
from pipeline.graph import BY_NAME
from pipeline.latest_links import write_latest_links
from pipeline.planner import Decision, Selection, plan
from pipeline.ray_session import RaySession
from pipeline.version import code_commit
from pipeline.wandb_stage_log import log_stage
from storage.artifact_store import ArtifactStore, open_store
from storage.local_store import FAILURE, RUN_INDEX, LocalArtifactStore, inventory, remove_temporaries, write_json_atomic
from storage.node_transfer.driver import NodeTransfer
from storage.urls import is_url

LIBRARIES = ("torch", "ray", "deepspeed", "pyarrow", "tokenizers", "datasets", "wandb", "pydantic")


class StageFailed(RuntimeError):
    """A stage raised (or its outputs could not be recorded: `while_doing`); the message
    names the stage and the cause. No manifest was written."""

    def __init__(self, stage: str, cause: BaseException, while_doing: str = ""):
        during = f" while {while_doing}" if while_doing else ""
        super().__init__(f"stage '{stage}' failed{during}: {type(cause).__name__}: {cause}")
        self.stage = stage
        self.cause = cause


@dataclass
class RunResult:
    decisions: list[Decision]
    ran: list[str] = field(default_factory=list)
    ray_started: bool = False


def run_pipeline(cfg: ExperimentConfig, selection: Selection = Selection(), *,
                 config_path: str | None = None, echo=print,
                 load_stage=None, use_ray: bool = True, verify: bool = False,
                 wait_lock: bool = False, sweep: str | None = None) -> RunResult:
    """Run what `plan` selects. `load_stage(spec) -> function` and `use_ray=False` let
    engine tests drive plain functions with no Ray. `verify` compares every reused
    output's sha256 with its manifest (sizes are always compared). Each stage runs under
    its directory's lock (storage.stage_lock): a stage another driver is writing is
    refused, or with `wait_lock` waited for and then reused if that driver finished it.
    `sweep` names the sweep this run is a point of (recorded in pipeline.json)."""
    if cfg.sweep is not None:
        raise ConfigError(
            f"experiment '{cfg.name}' has a sweep: section: run it with `pretrain sweep CONFIG` "
            f"(one experiment per point), or add `-o sweep=` to run the base config alone")
    load_stage = load_stage or (lambda spec: spec.load())
    fingerprints = compute_all(cfg)
    decisions = plan(cfg, selection, deep=verify, fingerprints=fingerprints)
    to_run = [d for d in decisions if d.action == "run"]
    _check_data_dir(cfg, to_run)
    store = open_store(cfg.store_location, cfg.resolved_store)
    result = RunResult(decisions)
    _write_run_index(cfg, fingerprints, config_path, sweep, selection)
    write_latest_links(cfg, fingerprints, echo)  # <workdir>/latest/<stage> -> this run's folders
    with RaySession(cfg.ray) as ray_session:
        for decision in decisions:
            if decision.action != "run":
                echo(_not_running(decision))
                continue
            spec = BY_NAME[decision.stage]
            what = f"stage '{spec.name}' ({decision.fingerprint}) in {store}"
            with store.lock(spec.name, decision.fingerprint, what=what, wait=wait_lock,
                            echo=echo) as lock:
                if not decision.forced and _finished_meanwhile(store, decision):
                    echo(f"[{decision.stage}] cached ({decision.fingerprint}): finished by the run "
                         f"we waited for")
                    continue
                if decision.damage:
                    echo(f"[{decision.stage}] removing damaged output before the rerun: "
                         + "; ".join(str(d) for d in decision.damage))
                    store.remove_damaged(spec.name, decision.fingerprint, list(decision.damage),
                                         scope=spec.damage_scope)
                if spec.needs_ray and use_ray:
                    ray_session.ensure_started(echo)
                echo(f"[{decision.stage}] running ({decision.fingerprint}): {decision.reason}")
                manifest = _run_stage(cfg, store, decision, fingerprints, load_stage(spec), lock, use_ray)
            result.ran.append(decision.stage)
            summary = _summary(manifest["metrics"])
            echo(f"[{decision.stage}] done in {manifest['wall_seconds']:.1f}s" + (f" {summary}" if summary else ""))
        result.ray_started = ray_session.started
    return result


def _finished_meanwhile(store: ArtifactStore, decision: Decision) -> bool:
    """Whether the stage became finished and intact between plan and taking its lock
    (another driver held the lock and completed it)."""
    if decision.damage or not store.is_finished(decision.stage, decision.fingerprint):
        return False
    return not store.damaged(decision.stage, decision.fingerprint)


def _run_stage(cfg: ExperimentConfig, store: ArtifactStore, decision: Decision,
               fingerprints: dict, stage_function, lock=None, use_ray: bool = True) -> dict:
    spec = BY_NAME[decision.stage]
    fp, identity = fingerprints[spec.name]
    # A forced stage must not "resume" from its own finished checkpoints.
    output_dir = store.prepare(spec.name, fp, keep_partial=spec.resumes and not decision.forced)
    # An earlier attempt killed mid-write (or on a full disk) may have left temporary
    # files; a resuming stage keeps its *.partial progress.
    remove_temporaries(output_dir, spec.scratch_dirs, keep_partial=True)
    # On an object store, the inputs' finished files are downloaded into the mirror
    # first, but for their bulk files (shards, weights): the tasks that read those fetch
    # them where they run.
    inputs = {name: store.fetch(name, fingerprints[name][0],
                                # Without Ray (engine tests), nothing runs elsewhere.
                                leave=BY_NAME[name].bulk_files if use_ray else ())
              for name in spec.inputs}
    input_manifests = {name: store.manifest(name, fingerprints[name][0]) for name in spec.inputs}
    # On an object store, tasks and workers on other nodes fetch and upload their own
    # files (storage.node_transfer.driver); the commit then skips what they uploaded.
    node_transfer = _node_transfer(store, output_dir, input_manifests, fingerprints, spec)
    if node_transfer is not None and spec.resumes and not decision.forced:
        node_transfer.restore_remote()  # what an earlier attempt's tasks elsewhere finished
    ctx = StageContext(
        name=spec.name, config=getattr(cfg, spec.name), experiment=cfg, output_dir=output_dir,
        inputs=inputs, output_url=store.stage_url(spec.name, fp), input_manifests=input_manifests,
        fingerprint=fp, input_digests=dict(identity.get("data", {})), node_transfer=node_transfer,
    )
    start = time.time()
    try:
        metrics = stage_function(ctx) or {}
    except Exception as error:  # recorded for `status`; never a manifest
        if _raised_by_an_interrupt(error):
            # Ctrl-C or SIGTERM landed in code that wraps what it raises: Python 3.11
            # turns an exception from `__set_name__` while an import builds a class into
            # "RuntimeError: Error calling __set_name__ ...". Still a stop, not a failure.
            raise KeyboardInterrupt from error
        _record_failure(store, spec.name, fp, error)
        raise StageFailed(spec.name, error) from error
    # Ctrl-C (KeyboardInterrupt) passes through untouched: the directory stays without a
    # manifest and the next run sees an interrupted attempt.
    end = time.time()
    try:
        remove_temporaries(output_dir, spec.scratch_dirs)
        files = inventory(output_dir, spec.scratch_dirs)
        elsewhere: frozenset[str] = frozenset()
        if node_transfer is not None:
            files, elsewhere = with_remote_files(files, node_transfer.remote_files(), spec.scratch_dirs)
    except OSError as error:  # e.g. a file the stage wrote vanished or cannot be read
        _record_failure(store, spec.name, fp, error)
        raise StageFailed(spec.name, error, "listing its outputs") from error
    manifest = {
        "stage": spec.name, "fingerprint": fp, "identity": identity,
        "inputs": {name: fingerprints[name][0] for name in spec.inputs},
        "config": identity["config"], "code_version": spec.code_version,
        "start_time": start, "end_time": end, "wall_seconds": end - start,
        "host": socket.gethostname(), "python": platform.python_version(),
        "libraries": _library_versions(), "argv": sys.argv,
        "files": files, "metrics": metrics,
    }
    if lock is not None:
        lock.check_held()  # an object-store lease taken over meanwhile: never commit
    try:
        if node_transfer is None:
            store.write_manifest(spec.name, fp, manifest)
        else:
            store.write_manifest(spec.name, fp, manifest, in_bucket=node_transfer.in_bucket(),
                                 elsewhere=elsewhere, removed=node_transfer.dropped_files())
    except OSError as error:  # a full disk: the manifest is written atomically, so none is there
        _record_failure(store, spec.name, fp, error)
        raise StageFailed(spec.name, error, "writing its manifest") from error
    log_stage(cfg, manifest, output_dir)  # one wandb run per stage; only ever warns
    return manifest


def _raised_by_an_interrupt(error: BaseException) -> bool:
    """Whether a KeyboardInterrupt (Ctrl-C, or SIGTERM through pipeline.interrupts) is
    in the chain of causes of `error`."""
    seen: set[int] = set()
    cause: BaseException | None = error
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, KeyboardInterrupt):
            return True
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    return False


def _record_failure(store: ArtifactStore, stage: str, fingerprint: str, error: BaseException) -> None:
    """failure.json for `status`. On a full disk that write fails too: the stage's own
    error must still reach the user, so this only warns (on stderr) and says why."""
    try:
        store.write_failure(stage, fingerprint, {
            "stage": stage, "error": f"{type(error).__name__}: {error}",
            "traceback": "".join(traceback.format_exception(error)), "time": time.time()})
    except Exception as record_error:  # noqa: BLE001 - any cause; the stage's error comes next
        where = store.stage_url(stage, fingerprint) or store.stage_dir(stage, fingerprint)
        print(f"warning: could not record the failure of stage '{stage}' in {where}/{FAILURE} "
              f"({type(record_error).__name__}: {record_error}); `pretrain status` will not show it",
              file=sys.stderr)


def _node_transfer(store, output_dir: Path, input_manifests: dict, fingerprints: dict,
                  spec) -> NodeTransfer | None:
    if store.url is None:
        return None
    entries = {f"{name}/{fingerprints[name][0]}/{entry['path']}": entry
               for name in spec.inputs for entry in (input_manifests.get(name) or {}).get("files", [])
               if entry.get("sha256")}
    return NodeTransfer(store.url, store.workdir, output_dir,
                       known={rel: entry["sha256"] for rel, entry in entries.items()},
                       known_sizes={rel: entry["bytes"] for rel, entry in entries.items()},
                       bulk=spec.bulk_files)


def with_remote_files(files: list[dict], remote: list[dict],
                      skip_dirs: tuple[str, ...] = ()) -> tuple[list[dict], frozenset[str]]:
    """The manifest's file list: what the stage's folder holds here (`files`, from
    `inventory`) and the bulk files tasks on other nodes wrote (`remote`, as they
    reported them), in one order; and the paths whose bytes are already in the bucket
    (remote files, also those a task on this node fetched since with the same bytes)."""
    local = {entry["path"]: entry for entry in files}
    elsewhere = set()
    for entry in remote:
        if Path(entry["path"]).parts[0] in skip_dirs:
            continue
        held = local.get(entry["path"])
        if held is None or held["sha256"] == entry["sha256"]:
            local[entry["path"]] = entry
            elsewhere.add(entry["path"])
    merged = sorted(local.values(), key=lambda entry: Path(entry["path"]).parts)
    return merged, frozenset(elsewhere)


def _check_data_dir(cfg: ExperimentConfig, to_run: list[Decision]) -> None:
    readers = [d.stage for d in to_run if BY_NAME[d.stage].reads_data_dir]
    if readers and not cfg.resolved_data_dir.is_dir():
        raise ConfigError(
            f"data_dir {cfg.resolved_data_dir} does not exist (stages {', '.join(readers)} read "
            f"it); set DATA_DIR to the shared data folder, e.g. `make demo DATA_DIR=/path/to/shared/data` "
            f"or `export DATA_DIR=...`")


def _write_run_index(cfg: ExperimentConfig, fingerprints: dict, config_path: str | None,
                     sweep: str | None = None, selection: Selection = Selection()) -> None:
    workdir = cfg.resolved_workdir
    workdir.mkdir(parents=True, exist_ok=True)
    # "selected": what this run set out to finish (--only / --from), so that a run that
    # finished them reads as done (pipeline.run_state), not as pending the others.
    index = {"name": cfg.name, "config_file": config_path, "updated": time.time(),
             "stages": {name: fp for name, (fp, _) in fingerprints.items()},
             "selected": [name for name in fingerprints if name in selection.selected()]}
    if cfg.store_url:
        if cfg.store_url != cfg.workdir_url:
            index["store_url"] = cfg.store_url
    elif cfg.resolved_store != workdir:
        # Relative, so that a sweep root moved or mounted elsewhere still finds its store.
        index["store"] = os.path.relpath(cfg.resolved_store, workdir)
    if sweep:
        index["sweep"] = sweep
    if (commit := code_commit()) is not None:  # the code that ran (the report's lineage)
        index["git_commit"] = commit
    write_json_atomic(workdir / RUN_INDEX, index)
    # Atomic like the index: two drivers on one workdir must not interleave their bytes.
    resolved = workdir / f".config.resolved.yaml.{os.getpid()}"
    resolved.write_text(yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False), encoding="utf-8")
    os.replace(resolved, workdir / "config.resolved.yaml")
    if cfg.workdir_url:  # one PUT each: an object appears whole, like the renames above
        remote = open_store(cfg.workdir_url, workdir)
        for name in (RUN_INDEX, "config.resolved.yaml"):
            remote.put_small(name, (workdir / name).read_bytes())


def _library_versions() -> dict[str, str]:
    versions = {}
    for name in LIBRARIES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions


def _not_running(decision: Decision) -> str:
    if decision.action == "missing":  # "missing" read like a fault; --only / --from left it out
        return f"[{decision.stage}] not selected ({decision.fingerprint}, not run yet)"
    return f"[{decision.stage}] {decision.action} ({decision.fingerprint})"


def _summary(metrics: dict, limit: int = 4) -> str:
    # Per-task and per-source metrics ("sst2/accuracy") are the stage's own table, printed
    # above the done line (and in `status`): the done line would only repeat them, worse.
    shown = [(k, v) for k, v in metrics.items() if isinstance(v, (int, float)) and "/" not in k][:limit]
    return " ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in shown)


def load_run_index(run_dir: Path | str) -> dict:
    import json

    if is_url(run_dir):
        return _load_remote_run_index(str(run_dir))
    path = Path(run_dir) / RUN_INDEX
    if not path.is_file():
        hint = (" (it is a sweep root: pass one of its points, or `pretrain dashboard` the root)"
                if (Path(run_dir) / "sweep.json").is_file() else "")
        raise ConfigError(f"{run_dir} is not a run directory (no {RUN_INDEX}){hint}; "
                          f"run `pretrain run CONFIG` first, or pass runs/<name>")
    return json.loads(path.read_text(encoding="utf-8"))


def _load_remote_run_index(url: str) -> dict:
    import json

    remote = open_store(url)
    data = remote.get_small(RUN_INDEX)
    if data is None:
        raise ConfigError(f"{url} is not a run (no {RUN_INDEX} there); check the URL, or run "
                          f"`pretrain run CONFIG -o workdir={url}` first")
    # Into this machine's mirror of the run, where the report code reads its config.
    remote.workdir.mkdir(parents=True, exist_ok=True)
    for name, content in ((RUN_INDEX, data), ("config.resolved.yaml", remote.get_small("config.resolved.yaml"))):
        if content is not None:
            (remote.workdir / name).write_bytes(content)
    return json.loads(data)


def run_store(run_dir: Path | str, index: dict | None = None) -> ArtifactStore:
    """The store holding a run's stage outputs: its own folder, the one pipeline.json
    names (a sweep point's outputs live in the sweep's shared store), or its bucket."""
    index = index if index is not None else load_run_index(run_dir)
    if index.get("store_url"):
        return open_store(index["store_url"])
    if is_url(run_dir):
        return open_store(str(run_dir))
    return LocalArtifactStore((Path(run_dir) / index.get("store", ".")).resolve())
