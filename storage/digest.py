"""The sha256 of bytes read in blocks, in one place: what manifests record, what the
object-store checks compare (a local file, an object in a bucket, a file's first bytes)."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import BinaryIO

_BLOCK = 8 << 20


def sha256_stream(stream: BinaryIO, limit: int | None = None) -> str:
    """The hex sha256 of what `stream` holds from where it stands (its first `limit`
    bytes, when given: fewer if it ends first)."""
    digest, left = hashlib.sha256(), limit
    while left is None or left > 0:
        block = stream.read(_BLOCK if left is None else min(left, _BLOCK))
        if not block:
            break
        digest.update(block)
        if left is not None:
            left -= len(block)
    return digest.hexdigest()


def sha256_file(path: str | Path) -> str:
    with open(path, "rb") as f:
        return sha256_stream(f)
