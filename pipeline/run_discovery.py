"""Every run directory under a root (`pretrain dashboard ROOT`, `pretrain report ROOT`,
sweep.html): a folder of experiments, a sweep's root, or a run itself. A sweep whose
root is an object-store URL names its points in its sweep.json (`bucket_sweep_points`).

A run directory is one with a `pipeline.json`. The walk never enters a run (its stage
folders hold checkpoints), a sweep's shared `store/` (the stage outputs of all its
points), hidden folders, or symlinked folders (a link back up would loop), and stops
MAX_DEPTH levels down: listing a checkpoint tree would take longer than the page.
"""

from __future__ import annotations

import os
from pathlib import Path

from pipeline.config import ConfigError
from storage.local_store import RUN_INDEX

MAX_DEPTH = 4
SWEEP_INDEX = "sweep.json"  # a sweep's root: its points are the folders beside `store/`
SWEEP_STORE = "store"


def is_run_dir(path: str | Path) -> bool:
    return (Path(path) / RUN_INDEX).is_file()


def find_run_dirs(root: str | Path, *, max_depth: int = MAX_DEPTH) -> list[Path]:
    """Run directories at `root` or up to `max_depth` levels below it, sorted by path.
    Raises ConfigError when `root` does not exist or holds no run."""
    root = Path(root)
    if not root.is_dir():
        raise ConfigError(f"{root} does not exist; pass a run directory such as runs/<name>, "
                          f"or a folder of runs such as a sweep's root")
    if is_run_dir(root):
        return [root]
    runs: list[Path] = []
    pending = [(root, 0)]
    while pending:
        directory, depth = pending.pop()
        children = _subdirectories(directory)
        is_sweep_root = (directory / SWEEP_INDEX).is_file()
        for child in children:
            if is_run_dir(child):
                runs.append(child)
            elif depth + 1 < max_depth and not (is_sweep_root and child.name == SWEEP_STORE):
                pending.append((child, depth + 1))
    if not runs:
        raise ConfigError(
            f"{root} is not a run directory and holds none (no {RUN_INDEX} in it or up to "
            f"{max_depth} folders below); pass a run directory such as runs/<name>, or a folder "
            f"of runs such as a sweep's root (the folder with {SWEEP_INDEX})")
    return sorted(runs)


def _subdirectories(directory: Path) -> list[Path]:
    try:
        with os.scandir(directory) as entries:
            return [Path(entry.path) for entry in entries
                    if not entry.name.startswith(".") and entry.is_dir(follow_symlinks=False)]
    except OSError:  # unreadable (permissions, removed while walking): nothing to show there
        return []


def is_runs_root(paths: list[str | Path]) -> bool:
    """One existing folder that is not a run itself: `pretrain report/dashboard ROOT` mean
    every run under it (several paths, or a run, keep their one-run or comparison meaning)."""
    return len(paths) == 1 and Path(paths[0]).is_dir() and not is_run_dir(paths[0])


def bucket_sweep_points(url: str) -> list[str] | None:
    """The workdir URLs of the points of the sweep rooted at `url` (s3://...), as its
    sweep.json names them; None when `url` holds no sweep.json."""
    from storage.object_keys import filesystem, read_json
    from storage.urls import join

    fs, path = filesystem(url)
    index = read_json(fs, join(path, SWEEP_INDEX))
    if index is None:
        return None
    return [join(url, point["workdir"]) for point in index.get("points", [])
            if isinstance(point, dict) and point.get("workdir")]
