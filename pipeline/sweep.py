"""A sweep's points: the base config crossed with its axes, each a whole experiment.

    pretrain sweep configs/gpt-tiny.yaml -o pretrain.lr=[1e-3,3e-3] -o pretrain.model.hidden_size=[32,64]

Axes come from the YAML's `sweep:` section (grid and points, pipeline/sweep_config.py)
and from `-o key=[v1,v2,...]` (a list value makes an axis; a key whose value is already
a list, such as finetune.tasks, takes a list of lists: `-o finetune.tasks=[[sst2],[cola]]`).
A `-o` axis replaces a YAML axis of the same key; other `-o` overrides apply to every point.

Every point is an experiment named `<sweep>-<point>` with its workdir at
`<sweep root>/<point>` and its stage outputs in `<sweep root>/store`: points that agree on
a stage's fingerprint (its config section and inputs) share one output, computed once.
The root is the base config's workdir: a folder, or an object-store URL (s3://...), in
which case every point's workdir and the shared store are URLs under it and the sweep's
own files (sweep.json, logs, sweep.html / .md) are kept in this machine's mirror of the
root and uploaded beside them.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from pipeline.config import ConfigError, ExperimentConfig, load_config
from pipeline.object_store import join
from pipeline.sweep_config import RESERVED_KEYS
from stages.section import flatten

STORE_DIR = "store"
SWEEP_INDEX = "sweep.json"


@dataclass
class SweepPoint:
    name: str                   # the folder under the sweep root, e.g. hidden_size-64_lr-0.003
    overrides: dict[str, Any]   # the axis values of this point, dotted key -> value
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
        return self.root / STORE_DIR

    @property
    def where(self) -> str:
        """The root as the user named it (the URL of an object-store sweep)."""
        return self.root_url or str(self.root)

    def location(self, name: str) -> str:
        """Where `name` (a point's workdir, or the store) lives: under the URL or the folder."""
        return join(self.root_url, name) if self.root_url else str(self.root / name)


def expand_sweep(config_path: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> Sweep:
    """Validate the base config and every point; errors name the point and the key."""
    scalar_overrides = [o for o in overrides if not isinstance(_value(o), list)]
    defaults = flatten(load_config(config_path, scalar_overrides).model_dump(mode="json"))
    axis_overrides, plain_overrides = split_overrides(overrides, defaults)
    base = load_config(config_path, plain_overrides)
    section = base.sweep
    grid = dict(section.grid) if section else {}
    grid.update(axis_overrides)  # -o replaces the YAML's axis of the same key
    listed = list(section.points) if section and section.points else [{}]
    # A plain -o of a key the YAML varies fixes it for every point (else the axis would win).
    for override in plain_overrides:
        key = override.partition("=")[0].strip()
        if key not in axis_overrides and (key in grid or any(key in point for point in listed)):
            grid[key] = [_value(override)]
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
    point_values = [_validated_values(config_path, plain_overrides, values) for values in point_values]
    points = []
    for name, values in zip(point_names(point_values), point_values):
        cli = [*plain_overrides, *(f"{key}={json.dumps(value)}" for key, value in values.items()),
               f"name={base.name}-{name}", f"workdir={sweep.location(name)}",
               f"store={sweep.location(STORE_DIR)}", "sweep=", *_default_group(base, values)]
        points.append(SweepPoint(name, values, load_config(config_path, cli), cli))
    sweep.points = points
    return sweep


def _validated_values(config_path, plain_overrides: list[str], values: dict[str, Any]) -> dict[str, Any]:
    """The point's axis values as the config holds them once validated (YAML reads
    `1e-3` as a string; the config as the float 0.001): names and records use these."""
    try:
        config = load_config(config_path, [*plain_overrides, "sweep=",
                                           *(f"{k}={json.dumps(v)}" for k, v in values.items())])
    except ConfigError as error:
        raise ConfigError(f"sweep point {_describe(values)}: {error}") from None
    validated = flatten(config.model_dump(mode="json"))
    for key in values:
        if key not in validated and not any(k.startswith(key + ".") for k in validated):
            raise ConfigError(f"sweep point {_describe(values)}: '{key}' is not a config key")
    return {key: validated.get(key, values[key]) for key in values}


def split_overrides(overrides, base_values: dict[str, Any]) -> tuple[dict[str, list], list[str]]:
    """(-o axes: key -> values, the other -o overrides). A list value is an axis, except
    for a key whose base value (`base_values`, flattened) is a list: that key's axis is a
    list of lists."""
    axes, plain = {}, []
    for override in overrides:
        value = _value(override)
        if not isinstance(value, list):
            plain.append(override)
            continue
        key = override.partition("=")[0].strip()
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
    """`hidden_size-64_lr-0.003`: each varying key by its last part (its full dotted name
    when two keys end alike), in axis order; unique, and usable as a folder name."""
    keys = [k for k in dict.fromkeys(k for values in point_values for k in values)
            if len({json.dumps(values.get(k), sort_keys=True) for values in point_values}) > 1]
    leaves = [k.split(".")[-1] for k in keys]
    short = {k: (leaf if leaves.count(leaf) == 1 else k) for k, leaf in zip(keys, leaves)}
    names = []
    for i, values in enumerate(point_values):
        parts = [f"{short[k]}-{_value_text(values[k])}" for k in keys if k in values]
        name = "_".join(parts) or f"point{i}"
        if name in names:
            name = f"{name}_{i}"
        names.append(name)
    return names


def _value_text(value: Any) -> str:
    text = json.dumps(value, separators=(",", "")) if isinstance(value, (list, dict)) else str(value)
    return "".join(c if c.isalnum() or c in ".-+" else "-" for c in text).strip("-") or "none"


def _describe(values: dict[str, Any]) -> str:
    return ", ".join(f"{k}={json.dumps(v)}" for k, v in values.items()) or "the base config"


def _default_group(base: ExperimentConfig, values: dict[str, Any]) -> list[str]:
    # Every point's wandb run is grouped under the sweep unless the user chose a group
    # (in the YAML, with -o, or as an axis).
    if base.tracking.wandb.group is not None or "tracking.wandb.group" in values:
        return []
    return [f"tracking.wandb.group={base.name}"]


def _value(override: str) -> Any:
    _, sep, text = override.partition("=")
    try:
        return yaml.safe_load(text) if sep and text.strip() else None
    except yaml.YAMLError:
        return None  # load_config reports it, naming the flag
