"""Where the pretrain stage lists the weight snapshots it keeps (pretrain.snapshot_every),
and how the evaluate stage reads that list:

    <pretrain_dir>/snapshots/index.json    [{"step": 500, "tokens": 2048000,
                                             "path": "snapshots/step-0000500"}, ...]

stages/pretrain/snapshots.py writes the folders and the index. The names live here, below
both stages, because pretrain imports evaluate (it scores tasks during training) and so
evaluate may not import pretrain (the import contracts in pyproject.toml).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

SNAPSHOTS_DIR = "snapshots"
INDEX_NAME = "index.json"


def read_snapshot_index(pretrain_dir: Path) -> list[dict[str, Any]]:
    """The entries of <pretrain_dir>/snapshots/index.json, in step order; [] if there is none."""
    path = Path(pretrain_dir) / SNAPSHOTS_DIR / INDEX_NAME
    if not path.is_file():
        return []
    entries = json.loads(path.read_text(encoding="utf-8"))
    return sorted(entries, key=lambda entry: entry["step"])
