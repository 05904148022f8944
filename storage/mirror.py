"""This machine's local folder standing for an object-store location (its "mirror").

Kept apart from the object-store code so that the config (which names the mirror as the
resolved workdir of an s3:// run) imports none of it; in `stages` because a Ray task on
another node finds its own mirror here too (storage.node_transfer).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path


def mirror_root() -> Path:
    """Where object-store runs keep their local copies: $PRETRAIN_MIRROR, or
    ~/.cache/pretrain-pipeline/mirror."""
    return Path(os.environ.get("PRETRAIN_MIRROR",
                               Path.home() / ".cache" / "pretrain-pipeline" / "mirror")).expanduser()


def mirror_dir(url: str) -> Path:
    """The local folder that stands for `url` on this machine: stages write their files
    there, and the store uploads them. Named by the URL's hash plus its last part, so two
    prefixes never share one and a person can still tell which is which."""
    url = url.rstrip("/")
    digest = hashlib.sha256(url.encode()).hexdigest()[:12]
    tail = url.rsplit("/", 1)[-1] or "root"
    return (mirror_root() / f"{tail}-{digest}").resolve()
