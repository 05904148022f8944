"""The `sweep:` section of an experiment YAML: which overrides make the points.

    sweep:
      grid:                                  # every combination: 2 x 2 = 4 points
        pretrain.model.hidden_size: [32, 64]
        pretrain.lr: [1.0e-3, 3.0e-3]
      points:                                # and/or an explicit list (each crossed with the grid)
        - {pretrain.max_steps: 100}
        - {pretrain.max_steps: 400, dataset.seq_len: 128}
      max_concurrent: 2
      max_points: 256                        # a larger grid is refused (raise it on purpose)

Keys are the same dotted keys as `-o`; each point is validated as a whole config, so a
misspelled key or a bad value is an error naming the point before anything runs.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator

from stages.section import Section

# Set by `pretrain sweep` for every point; an axis over them would break the layout.
RESERVED_KEYS = ("name", "workdir", "store", "sweep")


class SweepConfig(Section):
    grid: dict[str, list[Any]] = Field(
        default_factory=dict, description="dotted config key -> the values it takes; the points are "
        "every combination (a cartesian product), crossed with `points` when both are given")
    points: list[dict[str, Any]] = Field(
        default_factory=list, description="explicit points, each a mapping of dotted key -> value")
    max_concurrent: int | None = Field(
        None, ge=1, description="points running at once (unset: as many as the Ray cluster's CPUs "
        "hold at pretrain.num_workers each); `pretrain sweep --max-concurrent` overrides it")
    max_points: int = Field(
        256, ge=1, description="the most points a sweep may have: each one is a whole experiment, and "
        "a grid multiplies fast (10 values on 3 axes: 1,000 points); a larger sweep is refused "
        "before anything is validated or written")

    @field_validator("grid")
    @classmethod
    def _axes_have_values(cls, grid: dict[str, list[Any]]) -> dict[str, list[Any]]:
        for key, values in grid.items():
            _check_key(key)
            if not values:
                raise ValueError(f"axis '{key}' has no values; give at least one, e.g. {key}: [1, 2]")
        return grid

    @field_validator("points")
    @classmethod
    def _points_use_plain_keys(cls, points: list[dict[str, Any]]) -> list[dict[str, Any]]:
        for point in points:
            for key in point:
                _check_key(key)
        return points


def _check_key(key: str) -> None:
    if key.split(".")[0] in RESERVED_KEYS:
        raise ValueError(f"'{key}' cannot vary in a sweep: `pretrain sweep` sets name, workdir and "
                         f"store for every point (<sweep root>/<point>, <sweep root>/store)")
