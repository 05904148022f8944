"""The artifact store on an object store: `<url>/<stage>/<fingerprint>/`, finished iff
`manifest.json` exists there and the files it lists are there with their sizes.

Stages keep writing to a local folder: `stage_dir` is this machine's mirror of the stage's
prefix (stages.mirror.mirror_dir). The store moves bytes at the two moments that
matter:

- `fetch` before a stage runs: its inputs' finished files are downloaded into the mirror
  (only those missing or of another size), so the stage reads local files as always.
- `write_manifest` when it succeeded: every file the manifest lists is uploaded, then the
  manifest is created with a conditional put (If-None-Match: * on S3, ifGenerationMatch=0
  on GCS). Objects appear whole or not at all, so a reader sees either no manifest or the
  complete one, and the files it lists are already there: the rename of the local store,
  without a rename.

Ray Train checkpoints do not pass through the mirror: the training stages give Ray Train
`stage_url(...)/ray` as its storage_path, so a driver killed mid-run (or its machine lost)
resumes from the bucket. A stage's other partial files live in the mirror until the
commit: a re-run on the same machine resumes from them, one on another machine starts the
stage over. Its Ray tasks and workers may run on other nodes: they fetch and upload their
own files, which the driver then gathers into the mirror (stages.staging.node_staging);
the commit skips those already uploaded (`in_bucket`).
"""

from __future__ import annotations

import hashlib
import json
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from pipeline.object_lease import ObjectLease, peek_lease
from pipeline.object_store import ObjectKeys, PreconditionFailed, filesystem, join, json_bytes
from pipeline.store import FAILURE, MANIFEST, ArtifactStore, Damage, StageCommitConflict, write_json_atomic
from stages.mirror import mirror_dir


class ObjectArtifactStore:
    def __init__(self, url: str, mirror: Path | None = None):
        self.url = url.rstrip("/")
        self.workdir = Path(mirror) if mirror is not None else mirror_dir(self.url)
        self.fs, self.root = filesystem(self.url)
        self.keys = ObjectKeys(self.fs)

    def __str__(self) -> str:
        return self.url

    # -- where things are -----------------------------------------------------------------
    def stage_dir(self, stage: str, fingerprint: str) -> Path:
        return self.workdir / stage / fingerprint

    def stage_url(self, stage: str, fingerprint: str) -> str:
        return join(self.url, stage, fingerprint)

    def _key(self, stage: str, fingerprint: str, *parts: str) -> str:
        return join(self.root, stage, fingerprint, *parts)

    # -- reading state --------------------------------------------------------------------
    def manifest(self, stage: str, fingerprint: str) -> dict | None:
        try:
            return json.loads(self.fs.cat_file(self._key(stage, fingerprint, MANIFEST)))
        except FileNotFoundError:
            return None

    def is_finished(self, stage: str, fingerprint: str) -> bool:
        return self.fs.exists(self._key(stage, fingerprint, MANIFEST))

    def failure(self, stage: str, fingerprint: str) -> dict | None:
        try:
            return json.loads(self.fs.cat_file(self._key(stage, fingerprint, FAILURE)))
        except FileNotFoundError:
            return None

    def started(self, stage: str, fingerprint: str) -> bool:
        """Whether any object exists under the stage's prefix (an attempt began)."""
        return bool(self.fs.find(self._key(stage, fingerprint), maxdepth=None, withdirs=False)[:1]) \
            or self.stage_dir(stage, fingerprint).is_dir()

    def previous_manifests(self, stage: str) -> list[dict]:
        found = []
        for path in self.fs.glob(join(self.root, stage, "*", MANIFEST)):
            try:
                found.append(json.loads(self.fs.cat_file(path)))
            except (OSError, ValueError):
                continue
        return sorted(found, key=lambda m: m.get("end_time", 0), reverse=True)

    def _remote_sizes(self, stage: str, fingerprint: str) -> dict[str, int]:
        prefix = self._key(stage, fingerprint)
        listing = self.fs.find(prefix, detail=True)  # one LIST per 1000 objects, not a HEAD per file
        return {path[len(prefix) + 1:]: info.get("size") for path, info in listing.items()}

    def damaged(self, stage: str, fingerprint: str, *, deep: bool = False,
                manifest: dict | None = None) -> list[Damage]:
        manifest = manifest or self.manifest(stage, fingerprint)
        if manifest is None:
            return []
        sizes = self._remote_sizes(stage, fingerprint)
        damage, intact = [], []
        for entry in manifest.get("files", []):
            size = sizes.get(entry["path"])
            if size is None:
                damage.append(Damage(entry["path"], "is missing from the bucket"))
            elif size != entry.get("bytes"):
                damage.append(Damage(entry["path"], f"is {size} bytes, the manifest says {entry.get('bytes')}"))
            elif deep and entry.get("sha256"):
                intact.append(entry)
        if intact:
            def digest(entry):
                hasher = hashlib.sha256()
                with self.fs.open(self._key(stage, fingerprint, entry["path"]), "rb",
                                  block_size=8 << 20) as f:
                    while chunk := f.read(8 << 20):
                        hasher.update(chunk)
                return hasher.hexdigest()

            with ThreadPoolExecutor(max_workers=8) as pool:
                for entry, value in zip(intact, pool.map(digest, intact)):
                    if value != entry["sha256"]:
                        damage.append(Damage(entry["path"], "has other bytes than when written (sha256 "
                                                            f"{value[:12]}..., the manifest says {entry['sha256'][:12]}...)"))
        return sorted(damage, key=lambda d: d.path)

    # -- moving bytes ---------------------------------------------------------------------
    def fetch(self, stage: str, fingerprint: str, *, max_file_bytes: int | None = None) -> Path:
        """Download the finished stage's files into the mirror (those missing or of
        another size; with max_file_bytes, only files up to that size)."""
        manifest = self.manifest(stage, fingerprint)
        directory = self.stage_dir(stage, fingerprint)
        if manifest is None:
            return directory
        wanted = []
        for entry in manifest.get("files", []):
            if max_file_bytes is not None and entry.get("bytes", 0) > max_file_bytes:
                continue
            local = directory / entry["path"]
            if local.is_file() and local.stat().st_size == entry.get("bytes"):
                continue
            local.parent.mkdir(parents=True, exist_ok=True)
            wanted.append((self._key(stage, fingerprint, entry["path"]), local))
        if wanted:
            partials = [local.with_name(f".{local.name}.partial") for _, local in wanted]
            # fsspec downloads a list concurrently (s3fs: asyncio); each lands under a
            # temporary name, so a killed fetch never leaves a short file that looks fetched.
            self.fs.get([remote for remote, _ in wanted], [str(p) for p in partials])
            for partial, (_, local) in zip(partials, wanted):
                partial.replace(local)
        write_json_atomic(directory / MANIFEST, manifest)  # so local readers see it finished
        return directory

    def prepare(self, stage: str, fingerprint: str, *, keep_partial: bool) -> Path:
        """Ready the mirror folder and the prefix for an attempt: the manifest goes first
        (a forced re-run is unfinished from its first write); without keep_partial,
        everything under the prefix and in the mirror goes too."""
        directory = self.stage_dir(stage, fingerprint)
        for name in (MANIFEST, FAILURE):
            self._remove(self._key(stage, fingerprint, name))
            (directory / name).unlink(missing_ok=True)
        if not keep_partial:
            self._remove(self._key(stage, fingerprint), recursive=True)
            if directory.exists():
                shutil.rmtree(directory)
        directory.mkdir(parents=True, exist_ok=True)
        return directory

    def write_manifest(self, stage: str, fingerprint: str, manifest: dict, *,
                       in_bucket: dict[str, tuple[int, int]] | None = None) -> Path:
        """Upload the manifest's files, then commit: create the manifest key only if it
        does not exist. A second commit of one fingerprint means the stage lease was
        broken; it is refused rather than overwriting the first.

        `in_bucket` names files already uploaded (by tasks on other nodes,
        stages.staging.node_staging) with the (size, mtime_ns) of the local copy then:
        those still unchanged are not uploaded again, and those the stage removed before
        it finished (a scratch folder) are removed from the bucket too."""
        directory = self.stage_dir(stage, fingerprint)
        key = self._key(stage, fingerprint, MANIFEST)
        if self.fs.exists(key):  # checked first too, so a committed stage's files stay as they are
            raise self._conflict(stage, fingerprint)
        self._remove(self._key(stage, fingerprint, FAILURE))
        in_bucket = in_bucket or {}
        files = [f for f in manifest.get("files", []) if not _unchanged(directory / f["path"], in_bucket.get(f["path"]))]
        if files:
            self.fs.put([str(directory / f["path"]) for f in files],
                        [self._key(stage, fingerprint, f["path"]) for f in files])
        listed = {f["path"] for f in manifest.get("files", [])}
        stale = [self._key(stage, fingerprint, path) for path in in_bucket if path not in listed]
        if stale:
            self.fs.rm(stale)
        try:
            self.keys.create(key, json_bytes(manifest))
        except PreconditionFailed:
            raise self._conflict(stage, fingerprint) from None
        (directory / FAILURE).unlink(missing_ok=True)
        return write_json_atomic(directory / MANIFEST, manifest)

    def _conflict(self, stage: str, fingerprint: str) -> StageCommitConflict:
        return StageCommitConflict(
            f"{self.stage_url(stage, fingerprint)}/{MANIFEST} already exists: another driver "
            f"committed this stage while this one ran it (its lease was taken over). Its "
            f"output stands; run again to reuse it")

    def write_failure(self, stage: str, fingerprint: str, failure: dict) -> None:
        directory = self.stage_dir(stage, fingerprint)
        if directory.is_dir():
            write_json_atomic(directory / FAILURE, failure)
        self.fs.pipe_file(self._key(stage, fingerprint, FAILURE), json_bytes(failure))

    def remove_damaged(self, stage: str, fingerprint: str, damage: list[Damage], *,
                       scope: str = "top") -> None:
        directory = self.stage_dir(stage, fingerprint)
        self._remove(self._key(stage, fingerprint, MANIFEST))
        (directory / MANIFEST).unlink(missing_ok=True)
        parts = (lambda d: d.path) if scope == "file" else (lambda d: Path(d.path).parts[0])
        for top in sorted({parts(d) for d in damage}):
            self._remove(self._key(stage, fingerprint, top), recursive=True)
            entry = directory / top
            if entry.is_dir():
                shutil.rmtree(entry)
            else:
                entry.unlink(missing_ok=True)

    def _remove(self, key: str, recursive: bool = False) -> None:
        try:
            self.fs.rm(key, recursive=recursive)
        except FileNotFoundError:
            pass

    # -- one writer per stage -------------------------------------------------------------
    def lease_key(self, stage: str, fingerprint: str) -> str:
        return join(self.root, stage, f".{fingerprint}.lock")

    def lock(self, stage: str, fingerprint: str, *, what: str, wait: bool = False, echo=print):
        return ObjectLease(self.fs, self.lease_key(stage, fingerprint), what=what, wait=wait, echo=echo)

    def lock_holder(self, stage: str, fingerprint: str) -> dict | None:
        return peek_lease(self.fs, self.lease_key(stage, fingerprint))

    # -- the run's own small files (pipeline.json, config.resolved.yaml) -------------------
    def put_small(self, name: str, data: bytes) -> None:
        self.fs.pipe_file(join(self.root, name), data)

    def get_small(self, name: str) -> bytes | None:
        try:
            return self.fs.cat_file(join(self.root, name))
        except FileNotFoundError:
            return None


def _unchanged(local: Path, uploaded: tuple[int, int] | None) -> bool:
    if uploaded is None:
        return False
    stat = local.stat()
    return (stat.st_size, stat.st_mtime_ns) == tuple(uploaded)


def open_store(location: str | Path, mirror: Path | None = None):
    """The store at a path (ArtifactStore) or at an object-store URL (s3://bucket/prefix,
    gs://...)."""
    if "://" in str(location):
        return ObjectArtifactStore(str(location), mirror)
    return ArtifactStore(Path(location))
