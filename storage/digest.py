"""The sha256 of a file's bytes, read in blocks: what manifests record and what the
object-store tasks check (storage.node_transfer), in one place for the engine and the stages."""

from __future__ import annotations

import hashlib
from pathlib import Path

_BLOCK = 1 << 20


def sha256_file(path: str | Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(_BLOCK):
            digest.update(block)
    return digest.hexdigest()
