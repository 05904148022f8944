"""The artifact store: `<workdir>/<stage>/<fingerprint>/`, finished iff manifest.json exists.

The manifest is written last and atomically (temp file, fsync, rename, fsync of the
directory), so a crash at any moment leaves either no manifest or a complete one.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any

MANIFEST = "manifest.json"
FAILURE = "failure.json"
RUN_INDEX = "pipeline.json"


class ArtifactStore:
    def __init__(self, workdir: Path):
        self.workdir = Path(workdir)

    def stage_dir(self, stage: str, fingerprint: str) -> Path:
        return self.workdir / stage / fingerprint

    def manifest(self, stage: str, fingerprint: str) -> dict | None:
        path = self.stage_dir(stage, fingerprint) / MANIFEST
        if not path.is_file():
            return None
        return json.loads(path.read_text(encoding="utf-8"))

    def is_finished(self, stage: str, fingerprint: str) -> bool:
        return (self.stage_dir(stage, fingerprint) / MANIFEST).is_file()

    def previous_manifests(self, stage: str) -> list[dict]:
        """Finished manifests of any fingerprint of `stage`, newest first."""
        found = []
        for path in (self.workdir / stage).glob(f"*/{MANIFEST}"):
            try:
                found.append(json.loads(path.read_text(encoding="utf-8")))
            except (OSError, json.JSONDecodeError):
                continue  # a manifest we cannot read is no evidence about the past
        return sorted(found, key=lambda m: m.get("end_time", 0), reverse=True)

    def prepare(self, stage: str, fingerprint: str, *, keep_partial: bool) -> Path:
        """Make the stage directory ready for an attempt. Removes any manifest first, so
        that a forced re-run is unfinished from its very first write."""
        directory = self.stage_dir(stage, fingerprint)
        (directory / MANIFEST).unlink(missing_ok=True)
        (directory / FAILURE).unlink(missing_ok=True)
        if directory.exists() and not keep_partial:
            shutil.rmtree(directory)
        directory.mkdir(parents=True, exist_ok=True)
        return directory

    def write_manifest(self, stage: str, fingerprint: str, manifest: dict) -> Path:
        return write_json_atomic(self.stage_dir(stage, fingerprint) / MANIFEST, manifest)

    def write_failure(self, stage: str, fingerprint: str, failure: dict) -> None:
        directory = self.stage_dir(stage, fingerprint)
        if directory.is_dir():
            write_json_atomic(directory / FAILURE, failure)

    def failure(self, stage: str, fingerprint: str) -> dict | None:
        path = self.stage_dir(stage, fingerprint) / FAILURE
        return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def write_json_atomic(path: Path, data: Any) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(temp, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=2, sort_keys=True, default=str)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(temp, path)
    directory_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory_fd)
    finally:
        os.close(directory_fd)
    return path


def inventory(directory: Path, skip_dirs: tuple[str, ...] = ()) -> list[dict]:
    """Every output file with its size and sha256 (the manifest's file list)."""
    files = []
    for path in sorted(Path(directory).rglob("*")):
        relative = path.relative_to(directory)
        if not path.is_file() or relative.parts[0] in skip_dirs or relative.name in (MANIFEST, FAILURE):
            continue
        files.append({"path": str(relative), "bytes": path.stat().st_size, "sha256": _sha256(path)})
    return files


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
