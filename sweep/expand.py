"""A sweep's points: the base config crossed with its axes, each a whole experiment.

    pretrain sweep configs/gpt-tiny.yaml -o pretrain.lr=[1e-3,3e-3] -o pretrain.model.hidden_size=[32,64]

Axes come from the YAML's `sweep:` section (grid and points, pipeline/sweep_config.py)
and from `-o key=[v1,v2,...]` (a list value makes an axis; a key whose value is already
a list, such as finetune.tasks, takes a list of lists: `-o finetune.tasks=[[sst2],[cola]]`).
A `-o` axis replaces a YAML axis of the same key; other `-o` overrides apply to every point.
A mapping value on a key that holds a mapping (`pretrain.model=[{hidden_size: 32}, ...]`,
or a whole section: `pretrain: [{max_steps: 5}, ...]`) is merged into it key by key, as
`-o pretrain.model.hidden_size=32` would be: the file's other keys there stay.

Points are named by the values that vary between them, as written (`lr-1e-3`); a long
value is cut and ends with a short hash of itself (`sources-path-corpus-a.txt-path-c-3f9a0c1e`),
and a name stays within MAX_NAME_CHARS. Two points that resolve to the same config
(`pretrain.lr=[1e-3, 0.001]`) are refused, naming both: they would be one experiment
run twice. A sweep of more than `sweep.max_points` points (default 256) is refused
before any point is validated.

Every point is an experiment named `<sweep>-<point>` with its workdir at
`<sweep root>/<point>` and its stage outputs in `<sweep root>/store`: points that agree on
a stage's fingerprint (its config section and inputs) share one output, computed once.
The root is the base config's workdir: a folder, or an object-store URL (s3://...), in
which case every point's workdir and the shared store are URLs under it and the sweep's
own files (sweep.json, logs, sweep.html / .md) are kept in this machine's mirror of the
root and uploaded beside them.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline.config import ConfigError, ExperimentConfig, load_config, parse_override
from pipeline.run_discovery import SWEEP_INDEX, SWEEP_STORE
from storage.urls import join
from pipeline.sweep_config import RESERVED_KEYS, SweepConfig
from stages.section import flatten

# A point's folder name: readable in a table, far below the 255 bytes a file name may have.
MAX_NAME_CHARS = 80
# One value's part of a name; a longer one (a list of sources) is cut and hashed.
MAX_VALUE_CHARS = 40
# Set per point by `pretrain sweep`: points differ in these and are still one experiment.
POINT_KEYS = ("name", "workdir", "store")


@dataclass
class SweepPoint:
    name: str                   # the folder under the sweep root, e.g. hidden_size-64_lr-0.003
    overrides: dict[str, Any]   # the axis values of this point, dotted key -> value (scalars as validated)
    config: ExperimentConfig    # the whole validated experiment
    cli_overrides: list[str] = field(default_factory=list)  # what `pretrain run` gets for it


@dataclass
class Sweep:
    name: str
    root: Path  # the sweep's own files: the root folder, or this machine's mirror of root_url
    config_path: str
    points: list[SweepPoint]
    max_concurrent: int | None
    root_url: str | None = None  # an object-store root (s3://...), else None

    @property
    def store(self) -> Path:
        return self.root / SWEEP_STORE

    @property
    def where(self) -> str:
        """The root as the user named it (the URL of an object-store sweep)."""
        return self.root_url or str(self.root)

    def location(self, name: str) -> str:
        """Where `name` (a point's workdir, or the store) lives: under the URL or the folder."""
        return join(self.root_url, name) if self.root_url else str(self.root / name)

    def publish(self, *names: str) -> None:
        """Copy the sweep's own files `names` (relative to its root) from this machine's
        mirror to the same names under an object-store root. A folder root needs nothing."""
        if not self.root_url:
            return
        from storage.object_keys import put_files

        put_files(self.root_url, self.root, names)

    def fetch_published(self, *names: str) -> None:
        """The reverse of `publish` for the files this machine's mirror lacks (a sweep
        resumed on another machine keeps its points' states and appends to their logs)."""
        if not self.root_url:
            return
        from storage.object_keys import get_missing_files

        get_missing_files(self.root_url, self.root, names)


def expand_sweep(config_path: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> Sweep:
    """Validate the base config and every point; errors name the point and the key."""
    values_of = {o: parse_override(o)[1] for o in overrides}  # a malformed value: an error naming the flag
    scalar_overrides = [o for o in overrides if not isinstance(values_of[o], list)]
    defaults = flatten(load_config(config_path, scalar_overrides).model_dump(mode="json"))
    axis_overrides, plain_overrides = split_overrides(overrides, defaults)
    base = load_config(config_path, plain_overrides)
    section = base.sweep
    grid = dict(section.grid) if section else {}
    grid.update(axis_overrides)  # -o replaces the YAML's axis of the same key
    listed = list(section.points) if section and section.points else [{}]
    # A plain -o of a key the YAML varies fixes it for every point (else the axis would win).
    for override in plain_overrides:
        key = ".".join(parse_override(override)[0])
        if key not in axis_overrides and (key in grid or any(key in point for point in listed)):
            grid[key] = [values_of[override]]
    _check_size(config_path, section or SweepConfig(), grid, listed)
    combos = [dict(zip(grid, values)) for values in itertools.product(*grid.values())] or [{}]
    point_values = [{**listed_point, **combo} for listed_point in listed for combo in combos]
    if point_values == [{}]:
        raise ConfigError(
            f"{config_path}: nothing to sweep: add a `sweep:` section (sweep.grid or sweep.points) "
            f"or give an axis as -o key=[v1,v2], e.g. -o pretrain.lr=[1e-3,3e-3]")
    if base.store_url and not base.workdir_url:
        raise ConfigError(
            f"{config_path}: store is {base.store_url} but workdir is a folder: a sweep keeps its "
            f"points' workdirs and their shared store under one root; set workdir to the object-store "
            f"URL (e.g. -o workdir={base.store_url}) and remove store")
    root = base.resolved_workdir  # a folder, or this machine's mirror of workdir's URL
    sweep = Sweep(base.name, root, str(config_path), [], section.max_concurrent if section else None,
                  root_url=base.workdir_url)
    base_config = base.model_dump(mode="json")
    points, seen = [], {}
    for name, values in zip(point_names(point_values), point_values):
        axis_flags = [flag for key, value in values.items()
                      for flag in value_overrides(key, value, base_config)]
        cli = [*plain_overrides, *axis_flags, f"name={base.name}-{name}", f"workdir={sweep.location(name)}",
               f"store={sweep.location(SWEEP_STORE)}", "sweep=", *_default_group(base, values)]
        config = _point_config(config_path, cli, values)
        resolved = config.model_dump(mode="json")
        experiment = json.dumps({k: v for k, v in resolved.items() if k not in POINT_KEYS}, sort_keys=True)
        if experiment in seen:
            raise _same_experiment(config_path, seen[experiment], values)
        seen[experiment] = values
        points.append(SweepPoint(name, _recorded(values, flatten(resolved)), config, cli))
    sweep.points = points
    return sweep


def _check_size(config_path, section: SweepConfig, grid: dict[str, list], listed: list[dict]) -> None:
    """Refuse a sweep larger than sweep.max_points before validating any point (a
    1,000-point grid took minutes to validate, only to be a typo)."""
    count = len(listed) * math.prod(len(values) for values in grid.values())
    if count <= section.max_points:
        return
    factors = [f"{len(values)} values of {key}" for key, values in grid.items() if len(values) > 1]
    factors += [f"{len(listed)} listed points"] if len(listed) > 1 else []
    raise ConfigError(
        f"{config_path}: this sweep has {count} points ({' x '.join(factors)}), more than "
        f"sweep.max_points ({section.max_points}); each point is a whole experiment: drop values "
        f"from the axes, or raise the limit on purpose (-o sweep.max_points={count})")


def _point_config(config_path, cli: list[str], values: dict[str, Any]) -> ExperimentConfig:
    """The point's whole config, validated once; errors name the point."""
    try:
        config = load_config(config_path, cli)
    except ConfigError as error:
        raise ConfigError(f"sweep point {_describe(values)}: {error}") from None
    return config


def _recorded(values: dict[str, Any], validated: dict[str, Any]) -> dict[str, Any]:
    """The point's values for sweep.json and the plan: scalars as the config holds them
    once validated (`validated`, flattened: YAML reads `1e-3` as a string, the config as
    the float 0.001), lists and mappings as written (validated, a source would have every
    default spelled out)."""
    for key in values:
        if key not in validated and not any(k.startswith(key + ".") for k in validated):
            raise ConfigError(f"sweep point {_describe(values)}: '{key}' is not a config key")
    return {key: value if isinstance(value, (list, dict)) else validated.get(key, value)
            for key, value in values.items()}


def value_overrides(key: str, value: Any, base_config: dict) -> list[str]:
    """The `-o` flags that set `key` to `value` in one point. A mapping on a key that holds
    a mapping in the base config (a section, `pretrain.model`) is merged into it key by
    key, as `-o` flags of its keys are (`{}` changes nothing): replacing the mapping would
    reset the file's other keys there to their defaults."""
    if isinstance(value, dict) and isinstance(_lookup(base_config, key), dict):
        return [flag for sub_key, sub_value in value.items()
                for flag in value_overrides(f"{key}.{sub_key}", sub_value, base_config)]
    return [f"{key}={json.dumps(value)}"]


def _lookup(config: dict, key: str) -> Any:
    node: Any = config
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def _same_experiment(config_path, first: dict[str, Any], second: dict[str, Any]) -> ConfigError:
    differ = [k for k in dict.fromkeys([*first, *second]) if first.get(k) != second.get(k)]
    how = "; ".join(f"{k}: {_as_written(first.get(k))} and {_as_written(second.get(k))} validate to "
                    f"the same config" for k in differ) or "the same values, listed twice"
    return ConfigError(
        f"{config_path}: sweep points {_describe(first)} and {_describe(second)} are the same "
        f"experiment ({how}); remove one of the values (each point would run the same stages twice)")


def split_overrides(overrides, base_values: dict[str, Any]) -> tuple[dict[str, list], list[str]]:
    """(-o axes: key -> values, the other -o overrides). A list value is an axis, except
    for a key whose base value (`base_values`, flattened) is a list: that key's axis is a
    list of lists."""
    axes, plain = {}, []
    for override in overrides:
        parts, value = parse_override(override)
        key = ".".join(parts)
        if not isinstance(value, list):
            plain.append(override)
            continue
        if isinstance(base_values.get(key), list) and not (value and all(isinstance(v, list) for v in value)):
            plain.append(override)  # a list-valued key set to one list for every point
            continue
        if key.split(".")[0] in RESERVED_KEYS:
            raise ConfigError(f"-o {override}: '{key}' cannot vary in a sweep (pretrain sweep sets "
                              f"name, workdir and store for every point)")
        if not value:
            raise ConfigError(f"-o {override}: an axis needs at least one value")
        axes[key] = value
    return axes, plain


def point_names(point_values: list[dict[str, Any]]) -> list[str]:
    """`hidden_size-64_lr-1e-3`: each key whose value differs between points (every key of
    a single point) by its last part (its full dotted name when two keys end alike), in
    axis order, with its value as written; unique, and usable as a folder name."""
    all_keys = list(dict.fromkeys(k for values in point_values for k in values))
    keys = [k for k in all_keys
            if len({json.dumps(values.get(k), sort_keys=True) for values in point_values}) > 1]
    keys = keys or (all_keys if len(point_values) == 1 else [])
    leaves = [k.split(".")[-1] for k in keys]
    short = {k: (leaf if leaves.count(leaf) == 1 else k) for k, leaf in zip(keys, leaves)}
    names = []
    for i, values in enumerate(point_values):
        parts = [f"{short[k]}-{_value_text(values[k])}" for k in keys if k in values]
        name = "_".join(parts) or f"point{i}"
        if len(name) > MAX_NAME_CHARS:  # many long axes: cut, and a hash of the point's values
            digest = _digest({k: values[k] for k in keys if k in values})
            name = f"{name[:MAX_NAME_CHARS - 9].rstrip('-_.')}-{digest}"
        if name in names:
            name = f"{name}_{i}"
        names.append(name)
    return names


def _value_text(value: Any) -> str:
    text = json.dumps(value, separators=(",", "")) if isinstance(value, (list, dict)) else str(value)
    text = re.sub(r"-{2,}", "-", "".join(c if c.isalnum() or c in ".-+" else "-" for c in text)).strip("-")
    if len(text) > MAX_VALUE_CHARS:  # e.g. a list of sources: its start, and a hash for the rest
        text = f"{text[:MAX_VALUE_CHARS - 9].rstrip('-.')}-{_digest(value)}"
    return text or "none"


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()[:8]


def _describe(values: dict[str, Any]) -> str:
    return ", ".join(f"{k}={_as_written(v)}" for k, v in values.items()) or "the base config"


def _as_written(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def _default_group(base: ExperimentConfig, values: dict[str, Any]) -> list[str]:
    # Every point's wandb run is grouped under the sweep unless the user chose a group
    # (in the YAML, with -o, or as an axis).
    if base.tracking.wandb.group is not None or "tracking.wandb.group" in values:
        return []
    return [f"tracking.wandb.group={base.name}"]
