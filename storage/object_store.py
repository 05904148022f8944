"""The artifact store on an object store: `<url>/<stage>/<fingerprint>/`, finished iff
`manifest.json` exists there and the files it lists are there with their sizes.

Stages keep writing to a local folder: `stage_dir` is this machine's mirror of the stage's
prefix (storage.mirror.mirror_dir). The store moves bytes at the two moments that
matter:

- `fetch` before a stage runs: its inputs' finished files are downloaded into the mirror
  (those it does not hold with the manifest's bytes), so the stage reads local files as
  always; but for the inputs' bulk files (StageSpec.bulk_files: shards, weights), which
  the tasks that read them fetch where they run.
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
own files, which the driver then gathers into the mirror, but for bulk files, which only
the bucket keeps (storage.node_transfer.driver); the commit skips those already uploaded
(`in_bucket`) and lists the bulk ones from the tasks' reports (`elsewhere`).

A stage computes only on bytes its manifest names. The mirror records, per file, the
sha256 it holds with the file's size and mtime then (storage.node_transfer.transfer: written when
a file is fetched, and when the commit uploads it); `fetch` reuses a copy whose record
still matches, hashes one without a matching record, and downloads (and hashes) the rest.
`damaged(deep=True)` (`run --verify`, `pretrain verify`) hashes the mirror's copies too,
record or not: a copy with other bytes is removed, so the stage reading it gets the
bucket's (`removed_copies` says which).
"""

from __future__ import annotations

import json
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from storage.digest import sha256_file, sha256_stream
from storage.errors import ConfigError
from storage.file_tree import matches_any
from storage.local_store import FAILURE, MANIFEST, Damage, StageCommitConflict, write_json_atomic
from storage.mirror import mirror_dir
from storage.node_transfer import transfer
from storage.object_keys import ObjectKeys, PreconditionFailed, join, json_bytes, open_bucket
from storage.object_lease import ObjectLease, peek_lease


class DamagedInput(ConfigError):
    """A finished stage's object has other bytes than its manifest says (found on download)."""


class ObjectArtifactStore:
    def __init__(self, url: str, mirror: Path | None = None):
        self.url = url.rstrip("/")
        self.workdir = Path(mirror) if mirror is not None else mirror_dir(self.url)
        self.fs, self.root = open_bucket(self.url)
        self.keys = ObjectKeys(self.fs)
        # (stage, fingerprint) -> this machine's copies that `damaged(deep=True)` found with
        # other bytes than the manifest's, and removed
        self.removed_copies: dict[tuple[str, str], list[Damage]] = {}

    def __str__(self) -> str:
        return self.url

    # -- where things are -----------------------------------------------------------------
    def stage_dir(self, stage: str, fingerprint: str) -> Path:
        return self.workdir / stage / fingerprint

    def stage_url(self, stage: str, fingerprint: str) -> str:
        return join(self.url, stage, fingerprint)

    def _key(self, stage: str, fingerprint: str, *parts: str) -> str:
        return join(self.root, stage, fingerprint, *parts)

    @staticmethod
    def _rel(stage: str, fingerprint: str, path: str) -> str:
        """A file's name relative to the mirror (and to the store's root in the bucket)."""
        return f"{stage}/{fingerprint}/{path}"

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
                with self.fs.open(self._key(stage, fingerprint, entry["path"]), "rb",
                                  block_size=8 << 20) as f:
                    return sha256_stream(f)

            with ThreadPoolExecutor(max_workers=8) as pool:
                for entry, value in zip(intact, pool.map(digest, intact)):
                    if value != entry["sha256"]:
                        damage.append(Damage(entry["path"], "has other bytes than when written (sha256 "
                                                            f"{value[:12]}..., the manifest says {entry['sha256'][:12]}...)"))
        if deep:
            self.removed_copies[(stage, fingerprint)] = self._check_copies(stage, fingerprint,
                                                                           manifest.get("files", []))
        return sorted(damage, key=lambda d: d.path)

    def _check_copies(self, stage: str, fingerprint: str, files: list[dict]) -> list[Damage]:
        """Hash this machine's copies of the stage's files, whatever their records say: a
        copy with the manifest's bytes is recorded again, any other is removed (the mirror
        is a cache; the next fetch downloads the bucket's). The removed ones, as Damage."""
        directory = self.stage_dir(stage, fingerprint)
        present = [entry for entry in files if entry.get("sha256") and (directory / entry["path"]).is_file()]
        removed = []
        for entry, digest in zip(present, self._digests(directory, present)):
            rel = self._rel(stage, fingerprint, entry["path"])
            if digest == entry["sha256"]:
                transfer.remember(self.workdir, rel, digest)
                continue
            (directory / entry["path"]).unlink(missing_ok=True)
            removed.append(Damage(entry["path"], f"had other bytes than the manifest's (sha256 "
                                                 f"{digest[:12]}..., the manifest says {entry['sha256'][:12]}...)"))
        return removed

    @staticmethod
    def _digests(directory: Path, files: list[dict]) -> list[str]:
        if not files:
            return []
        with ThreadPoolExecutor(max_workers=min(8, len(files))) as pool:
            return list(pool.map(lambda entry: sha256_file(directory / entry["path"]), files))

    # -- moving bytes ---------------------------------------------------------------------
    def fetch(self, stage: str, fingerprint: str, *, max_file_bytes: int | None = None,
              leave: tuple[str, ...] = ()) -> Path:
        """Make the finished stage's files in the mirror hold the manifest's bytes
        (with max_file_bytes, only files up to that size; files matching a `leave`
        pattern, its StageSpec.bulk_files, stay in the bucket for the tasks that read
        them): a copy is kept when the mirror's record of it still matches, or its sha256
        does; the others are downloaded."""
        manifest = self.manifest(stage, fingerprint)
        directory = self.stage_dir(stage, fingerprint)
        if manifest is None:
            return directory
        # A bulk file the mirror holds anyway (a task on this node fetched it) is kept
        # true like the others: code here may read it.
        entries = [entry for entry in manifest.get("files", [])
                   if (max_file_bytes is None or entry.get("bytes", 0) <= max_file_bytes)
                   and (not matches_any(entry["path"], leave) or (directory / entry["path"]).exists())]
        wanted = self._not_held(stage, fingerprint, entries)
        if wanted:
            self._download(stage, fingerprint, wanted)
        write_json_atomic(directory / MANIFEST, manifest)  # so local readers see it finished
        return directory

    def _not_held(self, stage: str, fingerprint: str, entries: list[dict]) -> list[dict]:
        """The entries this machine's mirror does not hold with the manifest's bytes."""
        directory = self.stage_dir(stage, fingerprint)
        wanted, unrecorded = [], []
        for entry in entries:
            try:
                size = (directory / entry["path"]).stat().st_size
            except OSError:
                wanted.append(entry)
                continue
            if size != entry.get("bytes"):
                wanted.append(entry)
            elif not entry.get("sha256"):
                continue  # a manifest without digests: its size is all there is to check
            elif not transfer.holds(self.workdir, self._rel(stage, fingerprint, entry["path"]),
                                    size, entry["sha256"]):
                # No record, or the copy changed since (same size, new mtime): its bytes decide.
                unrecorded.append(entry)
        for entry, digest in zip(unrecorded, self._digests(directory, unrecorded)):
            if digest == entry["sha256"]:
                transfer.remember(self.workdir, self._rel(stage, fingerprint, entry["path"]), digest)
            else:
                wanted.append(entry)
        return wanted

    def _download(self, stage: str, fingerprint: str, entries: list[dict]) -> None:
        """Fetch `entries` into the mirror in one call (s3fs and gcsfs fetch a list
        concurrently), each checked against its manifest sha256 before it replaces the
        local copy (transfer.download), and recorded."""
        checked = [(self._rel(stage, fingerprint, entry["path"]), entry["sha256"])
                   for entry in entries if entry.get("sha256")]
        try:
            transfer.download(self.fs, self.root, self.workdir, checked)
        except transfer.UnexpectedBytes as error:
            raise DamagedInput(
                f"{self.url}/{error.key[len(self.root) + 1:]} has other bytes than its manifest says "
                f"(sha256 {error.found[:12]}..., the manifest says {error.expected[:12]}...): stage "
                f"'{stage}' is damaged in the bucket; `pretrain run CONFIG --verify` finds its damaged "
                f"files and rebuilds them") from None
        unchecked = [entry for entry in entries if not entry.get("sha256")]
        if unchecked:
            targets = [self.stage_dir(stage, fingerprint) / entry["path"] for entry in unchecked]
            partials = [target.with_name(f".{target.name}.partial") for target in targets]
            for partial in partials:
                partial.parent.mkdir(parents=True, exist_ok=True)
            # Under a temporary name: a killed fetch never leaves a short file that looks fetched.
            self.fs.get([self._key(stage, fingerprint, entry["path"]) for entry in unchecked],
                        [str(partial) for partial in partials])
            for partial, target in zip(partials, targets):
                partial.replace(target)

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
                       in_bucket: dict[str, tuple[int, int]] | None = None,
                       elsewhere: frozenset[str] = frozenset(), removed: tuple[str, ...] = ()) -> Path:
        """Upload the manifest's files, then commit: create the manifest key only if it
        does not exist. A second commit of one fingerprint means the stage lease was
        broken; it is refused rather than overwriting the first.

        `in_bucket` names files already uploaded (by tasks on other nodes,
        storage.node_transfer.driver) with the (size, mtime_ns) of the local copy then:
        those still unchanged are not uploaded again, and those the stage removed before
        it finished (a scratch folder) are removed from the bucket too.

        `elsewhere` names manifest files whose only copy is the bucket's (written by
        tasks on other nodes, never brought to this machine: their sizes and digests came
        back with the task); `removed`, objects of such files the stage dropped."""
        directory = self.stage_dir(stage, fingerprint)
        key = self._key(stage, fingerprint, MANIFEST)
        if self.fs.exists(key):  # checked first too, so a committed stage's files stay as they are
            raise self._conflict(stage, fingerprint)
        self._remove(self._key(stage, fingerprint, FAILURE))
        in_bucket = in_bucket or {}
        files = [f for f in manifest.get("files", []) if f["path"] not in elsewhere
                 and not _unchanged(directory / f["path"], in_bucket.get(f["path"]))]
        if files:
            self.fs.put([str(directory / f["path"]) for f in files],
                        [self._key(stage, fingerprint, f["path"]) for f in files])
        listed = {f["path"] for f in manifest.get("files", [])}
        stale = [self._key(stage, fingerprint, path) for path in (*in_bucket, *removed) if path not in listed]
        if stale:
            self.fs.rm(stale)
        try:
            self.keys.create(key, json_bytes(manifest))
        except PreconditionFailed:
            raise self._conflict(stage, fingerprint) from None
        (directory / FAILURE).unlink(missing_ok=True)
        # The stage has finished writing: what is local now is what went up, with the
        # digests its inventory took, and later fetches reuse it without hashing it again.
        # A record that cannot be written (a full disk) costs that hash, never the commit.
        try:
            for entry in manifest.get("files", []):
                if entry.get("sha256") and (directory / entry["path"]).is_file():
                    transfer.remember(self.workdir, self._rel(stage, fingerprint, entry["path"]), entry["sha256"])
        except OSError:
            pass
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
