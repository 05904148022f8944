"""The artifact store: `<workdir>/<stage>/<fingerprint>/`, finished iff manifest.json exists
and the files it lists are still there as written.

The manifest is written last and atomically (temp file, fsync, rename, fsync of the
directory), so a crash at any moment leaves either no manifest or a complete one. Reuse
checks every listed file's size (one stat each); `damaged(..., deep=True)` (used by
`pretrain verify` and `run --verify`) also compares sha256.
"""

from __future__ import annotations

import json
import os
import shutil
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from storage.digest import sha256_file
from storage.file_tree import PARTIAL_SUFFIX, is_bookkeeping, leftover_temporaries
from storage.stage_lock import StageLock, peek_holder

MANIFEST = "manifest.json"
FAILURE = "failure.json"
RUN_INDEX = "pipeline.json"


class StageCommitConflict(RuntimeError):
    """A stage's manifest already exists where this driver was about to commit it."""


class LocalArtifactStore:
    """The store on a local (or mounted) file system (storage.artifact_store's protocol)."""

    url = None  # an object store's URL; None here

    def __init__(self, workdir: Path):
        self.workdir = Path(workdir)

    def __str__(self) -> str:
        return str(self.workdir)

    def stage_dir(self, stage: str, fingerprint: str) -> Path:
        return self.workdir / stage / fingerprint

    def stage_url(self, stage: str, fingerprint: str) -> str | None:
        """Where the stage's outputs live when that is not `stage_dir` (object stores)."""
        return None

    def fetch(self, stage: str, fingerprint: str, *, max_file_bytes: int | None = None,
              leave: tuple[str, ...] = ()) -> Path:
        """The finished stage's files, readable locally (here they already are)."""
        return self.stage_dir(stage, fingerprint)

    def started(self, stage: str, fingerprint: str) -> bool:
        return self.stage_dir(stage, fingerprint).is_dir()

    def lock(self, stage: str, fingerprint: str, *, what: str, wait: bool = False, echo=print):
        return StageLock(self.lock_path(stage, fingerprint), what=what, wait=wait, echo=echo)

    def lock_holder(self, stage: str, fingerprint: str) -> dict | None:
        return peek_holder(self.lock_path(stage, fingerprint))

    def manifest(self, stage: str, fingerprint: str) -> dict | None:
        path = self.stage_dir(stage, fingerprint) / MANIFEST
        if not path.is_file():
            return None
        return json.loads(path.read_text(encoding="utf-8"))

    def is_finished(self, stage: str, fingerprint: str) -> bool:
        """A manifest exists (whether its files are intact is `damaged`'s question)."""
        return (self.stage_dir(stage, fingerprint) / MANIFEST).is_file()

    def lock_path(self, stage: str, fingerprint: str) -> Path:
        # Beside the stage directory, not in it: `prepare` may delete the directory.
        return self.workdir / stage / f".{fingerprint}.lock"

    def damaged(self, stage: str, fingerprint: str, *, deep: bool = False,
                manifest: dict | None = None) -> list["Damage"]:
        """The manifest's files that are missing, of another size or (deep) other bytes."""
        manifest = manifest or self.manifest(stage, fingerprint)
        if manifest is None:
            return []
        return check_files(self.stage_dir(stage, fingerprint), manifest.get("files", []), deep=deep)

    def remove_damaged(self, stage: str, fingerprint: str, damage: list["Damage"], *,
                       scope: str = "top") -> None:
        """Unmark the stage as finished and delete what each damaged file takes with it:
        scope "top" = its top-level entry under the stage directory (a file, or a folder
        such as a fine-tuning task or `model/`), "file" = the file alone. A resuming stage
        then rebuilds that part and keeps the rest."""
        directory = self.stage_dir(stage, fingerprint)
        (directory / MANIFEST).unlink(missing_ok=True)
        parts = (lambda d: d.path) if scope == "file" else (lambda d: Path(d.path).parts[0])
        for top in sorted({parts(d) for d in damage}):
            entry = directory / top
            if entry.is_dir():
                shutil.rmtree(entry)
            else:
                entry.unlink(missing_ok=True)

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
        # A failure record from an earlier attempt never stands beside a manifest.
        (self.stage_dir(stage, fingerprint) / FAILURE).unlink(missing_ok=True)
        return write_json_atomic(self.stage_dir(stage, fingerprint) / MANIFEST, manifest)

    def write_failure(self, stage: str, fingerprint: str, failure: dict) -> None:
        directory = self.stage_dir(stage, fingerprint)
        if directory.is_dir():
            write_json_atomic(directory / FAILURE, failure)

    def failure(self, stage: str, fingerprint: str) -> dict | None:
        path = self.stage_dir(stage, fingerprint) / FAILURE
        return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def read_json_object(path: Path) -> dict:
    """A JSON object file's contents, or {} when it is missing, unreadable or not an object:
    for views (status, sweep indexes) that must show what they can of a run being written."""
    try:
        loaded = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return loaded if isinstance(loaded, dict) else {}


def write_json_atomic(path: Path, data: Any) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(temp, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=2, sort_keys=True, default=str)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(temp, path)
    except BaseException:
        # A full disk fails the write (or the flush): leave no half-written temp behind.
        temp.unlink(missing_ok=True)
        raise
    directory_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory_fd)
    finally:
        os.close(directory_fd)
    return path


def inventory(directory: Path, skip_dirs: tuple[str, ...] = ()) -> list[dict]:
    """Every output file with its size and sha256 (the manifest's file list): not the
    store's own records, tracking folders or temporary files (storage.file_tree)."""
    files = []
    for path in sorted(Path(directory).rglob("*")):
        relative = path.relative_to(directory)
        if (not path.is_file() or relative.parts[0] in skip_dirs or relative.name in (MANIFEST, FAILURE)
                or is_bookkeeping(relative)):
            continue
        files.append({"path": str(relative), "bytes": path.stat().st_size, "sha256": sha256_file(path)})
    return files


def remove_temporaries(directory: Path, skip_dirs: tuple[str, ...] = (), *,
                       keep_partial: bool = False) -> list[Path]:
    """Delete the temporary files an earlier failed or killed write left in a stage
    directory; returns them. `keep_partial` spares `*.partial` files and folders, which
    a resuming stage may continue from (an atomic write's temp is never continued)."""
    removed = []
    for path in leftover_temporaries(directory, skip_dirs):
        if keep_partial and path.name.endswith(PARTIAL_SUFFIX):
            continue
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
        removed.append(path)
    return removed


@dataclass(frozen=True)
class Damage:
    path: str     # relative to the stage directory
    problem: str  # "missing", "is 100 bytes, the manifest says 2048", "sha256 differs ..."

    def __str__(self) -> str:
        return f"{self.path} {self.problem}"


def check_files(directory: Path, files: list[dict], *, deep: bool = False,
                workers: int | None = None) -> list[Damage]:
    """Sizes always (a stat each); with `deep`, sha256 too, several files at a time."""
    damage, intact = [], []
    for entry in files:
        path = Path(directory) / entry["path"]
        try:
            size = path.stat().st_size
        except OSError:
            damage.append(Damage(entry["path"], "is missing"))
            continue
        if size != entry.get("bytes"):
            damage.append(Damage(entry["path"], f"is {size} bytes, the manifest says {entry.get('bytes')}"))
        elif deep and entry.get("sha256"):
            intact.append(entry)
    if intact:
        with ThreadPoolExecutor(max_workers=workers or min(8, (os.cpu_count() or 1) + 2)) as pool:
            digests = pool.map(lambda e: sha256_file(Path(directory) / e["path"]), intact)
            damage += [Damage(e["path"], f"has other bytes than when written (sha256 {digest[:12]}..., "
                                         f"the manifest says {e['sha256'][:12]}...)")
                       for e, digest in zip(intact, digests) if digest != e["sha256"]]
    return sorted(damage, key=lambda d: d.path)


def describe_damage(damage: list[Damage], limit: int = 3) -> str:
    shown = "; ".join(str(d) for d in damage[:limit])
    return shown + (f"; and {len(damage) - limit} more" if len(damage) > limit else "")
