"""Decide, for every stage, whether it is cached or runs, and say why.

Cheapest checks first (DVC's `changed()`): fingerprints are functions of the config and
of the input files' contents, which are hashed only when a file's size or mtime changed
(pipeline.input_files); a finished stage is reused only while every output file in its
manifest still has its recorded size (and, with `deep`, its recorded sha256).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pipeline.config import ConfigError, ExperimentConfig
from pipeline.fingerprint import compute_all
from pipeline.graph import BY_NAME, STAGES, STAGE_NAMES, downstream_of
from storage.artifact_store import ArtifactStore, open_store
from storage.local_store import Damage, describe_damage
from storage.writer_lock import describe_holder

Action = Literal["cached", "run", "missing"]


@dataclass(frozen=True)
class Decision:
    stage: str
    fingerprint: str
    action: Action  # missing = not finished and not selected to run
    reason: str
    forced: bool = False  # forced runs start from an empty directory, never resume
    damage: tuple[Damage, ...] = ()  # output files found damaged; removed before the rerun


@dataclass(frozen=True)
class Selection:
    """Which stages a command asks for. `force` holds stage names, or "*" for all selected."""

    only: tuple[str, ...] = ()
    from_stage: str | None = None
    force: tuple[str, ...] = ()

    def validate(self) -> None:
        for name in (*self.only, *( [self.from_stage] if self.from_stage else []),
                     *(f for f in self.force if f != "*")):
            if name not in BY_NAME:
                raise ConfigError(f"unknown stage '{name}'; stages are: {', '.join(STAGE_NAMES)}")
        if self.only and self.from_stage:
            raise ConfigError("use either --only or --from, not both")

    def selected(self) -> set[str]:
        if self.only:
            return set(self.only)
        if self.from_stage:
            return downstream_of(self.from_stage)
        return set(STAGE_NAMES)

    def forced(self) -> set[str]:
        forced: set[str] = set()
        for name in self.force:
            # A forced stage rewrites its output, so whatever read the old output is
            # re-run too (within the selection).
            forced |= self.selected() if name == "*" else downstream_of(name) & self.selected()
        return forced


def plan(cfg: ExperimentConfig, selection: Selection = Selection(), *, deep: bool = False,
         fingerprints: dict | None = None) -> list[Decision]:
    """One decision per stage. `deep` compares every output file's sha256 with its
    manifest (`run --verify`); otherwise sizes only."""
    selection.validate()
    store = open_store(cfg.store_location, cfg.resolved_store)
    # A plan writes nothing (not even the input-hash cache); `run` computes the
    # fingerprints itself, saves the cache and passes them in.
    fingerprints = fingerprints or compute_all(cfg, save_cache=False)
    selected, forced = selection.selected(), selection.forced()
    decisions: list[Decision] = []
    for spec in STAGES:
        fp, identity = fingerprints[spec.name]
        damage = () if spec.name in forced else tuple(store.damaged(spec.name, fp, deep=deep))
        if spec.name in forced:
            decisions.append(Decision(spec.name, fp, "run", "forced (--force)", forced=True))
        elif damage:
            why = (f"damaged output: {describe_damage(list(damage))}; the rerun removes the damaged "
                   f"files and rebuilds them (`--force {spec.name}` starts the stage over)")
            action = "run" if spec.name in selected else "missing"
            decisions.append(Decision(spec.name, fp, action, why, damage=damage))
        elif store.is_finished(spec.name, fp):
            decisions.append(Decision(spec.name, fp, "cached", "finished with this fingerprint"))
        elif spec.name in selected:
            decisions.append(Decision(spec.name, fp, "run", _why_not_cached(store, spec.name, fp, identity)))
        else:
            decisions.append(Decision(spec.name, fp, "missing", "not finished, not selected"))
    _check_inputs_available(decisions)
    return decisions


def plan_warnings(cfg: ExperimentConfig, decisions: list[Decision]) -> list[str]:
    """What `plan` can already tell will stop `run` (the runner's own checks, as warnings)."""
    readers = [d.stage for d in decisions if d.action == "run" and BY_NAME[d.stage].reads_data_dir]
    if readers and not cfg.resolved_data_dir.is_dir():
        return [f"data_dir {cfg.resolved_data_dir} does not exist (stages {', '.join(readers)} read it), "
                f"so `pretrain run` would stop; set DATA_DIR to the shared data folder "
                f"(`export DATA_DIR=...`) or -o data_dir=PATH"]
    return []


def _check_inputs_available(decisions: list[Decision]) -> None:
    by_stage = {d.stage: d for d in decisions}
    for decision in decisions:
        if decision.action != "run":
            continue
        for input_name in BY_NAME[decision.stage].inputs:
            upstream = by_stage[input_name]
            if upstream.action == "missing":
                state = ("has a damaged output: " + describe_damage(list(upstream.damage))
                         if upstream.damage else "is not finished for this config")
                raise ConfigError(
                    f"stage '{decision.stage}' reads '{input_name}', which {state}; run it first "
                    f"(drop --only, or use --from {input_name})")


def _why_not_cached(store: ArtifactStore, stage: str, fp: str, identity: dict) -> str:
    holder = store.lock_holder(stage, fp)
    if holder is not None:
        return f"being written now by {describe_holder(holder)}; a run now would be refused (or --wait-lock)"
    failure = store.failure(stage, fp)
    if failure:
        return f"failed last time ({failure.get('error', 'unknown error')}); will retry"
    if store.started(stage, fp):
        how = "resumes from its partial output" if BY_NAME[stage].resumes else "starts over"
        return f"an earlier attempt was interrupted; {how}"
    previous = store.previous_manifests(stage)
    if not previous:
        return "not run yet"
    return "stale: " + describe_change(previous[0].get("identity", {}), identity)


def describe_change(old: dict, new: dict) -> str:
    """Say which keys differ between two stage identities, most specific first."""
    changes, added, removed = [], [], []
    stage = new.get("stage", "")
    diffs = [(f"{stage}.{key}", a, b)
             for key, (a, b) in _flat_diff(old.get("config", {}), new.get("config", {})).items()]
    diffs += [(key, a, b)
              for key, (a, b) in _flat_diff(old.get("experiment", {}), new.get("experiment", {})).items()]
    for key, a, b in diffs:
        if a is _ABSENT:
            added.append(key)  # a newer code version added the key (its default applies)
        elif b is _ABSENT:
            removed.append(key)
        else:
            changes.append(f"{key} {a!r} -> {b!r}")
    if added:
        changes.append(f"new config keys {', '.join(added)}")
    if removed:
        changes.append(f"config keys no longer used {', '.join(removed)}")
    if old.get("code_version") != new.get("code_version"):
        changes.append(f"code version {old.get('code_version')} -> {new.get('code_version')}")
    for name, fp in new.get("inputs", {}).items():
        if old.get("inputs", {}).get(name) != fp:
            changes.append(f"input '{name}' changed")
    changes += describe_data_change(old.get("data", {}), new.get("data", {}))
    return ", ".join(changes) or "fingerprint differs"


def describe_data_change(old: dict, new: dict, limit: int = 3) -> list[str]:
    """Name the input files that changed, appeared or went away (a few, then a count)."""
    found = []
    for template, names in (
            ("input file{s} {names} changed", [n for n in sorted(new) if n in old and old[n] != new[n]]),
            ("new input file{s} {names}", [n for n in sorted(new) if n not in old]),
            ("input file{s} {names} gone", [n for n in sorted(old) if n not in new])):
        if names:
            shown = ", ".join(names[:limit]) + (f" and {len(names) - limit} more" if len(names) > limit else "")
            found.append(template.format(s="s" if len(names) > 1 else "", names=shown))
    return found
_ABSENT = object()  # a key missing on one side, as opposed to one set to None


def _flat_diff(old: dict, new: dict, prefix: str = "") -> dict[str, tuple]:
    diff = {}
    for key in sorted(set(old) | set(new)):
        a, b = old.get(key, _ABSENT), new.get(key, _ABSENT)
        if isinstance(a, dict) and isinstance(b, dict):
            diff.update(_flat_diff(a, b, f"{prefix}{key}."))
        elif a != b:
            diff[f"{prefix}{key}"] = (a, b)
    return diff
