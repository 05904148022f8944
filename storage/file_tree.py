"""Name every file under a folder the same way wherever the folder lives, and tell a
stage's outputs from the bookkeeping beside them (tracking folders, temporary files)."""

from __future__ import annotations

import fnmatch
import os
import re
from pathlib import Path, PurePath


def local_tree(root: str | Path, prefix: str) -> dict[str, str]:
    """Every file under a local directory (hidden ones skipped), named `prefix/relative`."""
    root = Path(root).expanduser()
    if root.is_file():
        return {prefix: str(root)}
    if not root.is_dir():
        return {prefix: str(root)}  # hashes as missing; the stage then says what is wrong
    files = {}
    for directory, subdirs, names in os.walk(root):
        subdirs[:] = sorted(d for d in subdirs if not d.startswith("."))
        for name in sorted(names):
            if not name.startswith("."):
                path = os.path.join(directory, name)
                files[f"{prefix}/{Path(os.path.relpath(path, root)).as_posix()}"] = path
    return files


# What a stage directory holds besides the stage's outputs. Tracking folders: wandb keeps
# writing its logs after the stage (the engine's own run per stage opens after the
# manifest, and a later run in the same folder repoints `debug.log`), so listing them
# would make a finished stage look damaged. Temporary files: an atomic write's temp
# (`.<name>.tmp-<pid>`) and anything written under a `.partial` name before its rename,
# which a crash, a full disk or a kill can leave behind.
TRACKING_DIRS = ("wandb",)
PARTIAL_SUFFIX = ".partial"
_ATOMIC_TEMP = re.compile(r"\..+\.tmp-\d+")


def is_temporary(name: str) -> bool:
    """A file or folder name that only ever holds bytes on their way to another name."""
    return name.endswith(PARTIAL_SUFFIX) or _ATOMIC_TEMP.fullmatch(name) is not None


def is_bookkeeping(relative: str | PurePath) -> bool:
    """Whether a path under a stage directory is tracking or a temporary file rather
    than one of the stage's outputs (never listed in a manifest, for any store)."""
    parts = PurePath(relative).parts
    return any(part in TRACKING_DIRS for part in parts[:-1]) or any(is_temporary(p) for p in parts)


def leftover_temporaries(directory: str | Path, skip_dirs: tuple[str, ...] = ()) -> list[Path]:
    """Temporary files and folders under `directory` (outermost only), which an
    interrupted or failed write left behind. Not looked for under `skip_dirs` at its top
    (a stage's scratch) nor in tracking folders (wandb may still be writing there)."""
    found = []
    for current, subdirs, names in os.walk(directory):
        at_top = Path(current) == Path(directory)
        kept = []
        for name in sorted(subdirs):
            if is_temporary(name):
                found.append(Path(current) / name)
            elif name not in TRACKING_DIRS and not (at_top and name in skip_dirs):
                kept.append(name)
        subdirs[:] = kept
        found += [Path(current) / name for name in sorted(names) if is_temporary(name)]
    return found


def matches_any(relative: str, patterns: tuple[str, ...]) -> bool:
    """Whether a path under a stage directory matches one of `patterns`, fnmatch globs
    whose `*` also crosses `/` ("documents/*", "*/model/*.safetensors")."""
    return any(fnmatch.fnmatchcase(relative, pattern) for pattern in patterns)
