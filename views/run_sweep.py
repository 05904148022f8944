"""The config keys a sweep varies, read from the sweep.json beside its points: the runs
page shows them first among the config columns and offers them as the x-axis of its
metric-vs-hyperparameter plot.
"""

from __future__ import annotations

import json
from pathlib import Path

from pipeline.run_discovery import SWEEP_INDEX
from stages.report import RunSource


def swept_keys(sources: list[RunSource]) -> list[str]:
    """Every key a point's overrides name, in the order the sweep files first name them,
    over the sweeps the runs belong to (a point's folder sits beside its sweep.json)."""
    keys: list[str] = []
    for parent in dict.fromkeys(Path(s.run_dir).parent for s in sources if s.run_dir is not None):
        for point in _points(parent / SWEEP_INDEX):
            overrides = point.get("overrides") if isinstance(point, dict) else None
            for key in overrides if isinstance(overrides, dict) else ():
                if key not in keys:
                    keys.append(str(key))
    return keys


def _points(path: Path) -> list:
    try:
        points = json.loads(path.read_text(encoding="utf-8")).get("points")
    except (OSError, ValueError, AttributeError):
        return []  # no sweep here, or sweep.json being rewritten: the next poll reads it
    return points if isinstance(points, list) else []
