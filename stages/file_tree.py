"""Name every file under a folder the same way wherever the folder lives."""

from __future__ import annotations

import os
from pathlib import Path


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
