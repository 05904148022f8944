"""Moving files between a node's mirror and the bucket, and knowing, without reading
it again, that a local file holds given bytes.

Each node remembers what it fetched or uploaded in `<mirror>/.node-transfer/`: per file,
the sha256 of its bytes with the size and mtime the file had then; and in work.jsonl, a
line per task that ran there (its stage, files fetched and uploaded), to tell where the
work of a stage went. A file whose size and mtime still match its record holds those
bytes; any other local file is fetched again. Size alone would not do: a forced re-run
writes files of the same size with other bytes (retrained weights), and a node must never
use the old ones. The driver's mirror keeps the same records for what its store fetched
and committed (storage.object_store): they live beside the stage folders, never in one,
so no manifest lists them.
"""

from __future__ import annotations

import hashlib
import json
import os
import uuid
from pathlib import Path

from storage.digest import sha256_file, sha256_stream

RECORDS = ".node-transfer"


def bucket(url: str, options: dict | None = None):
    """(fsspec file system, root path) for the run's bucket URL (with the driver's
    connection options in a task: storage.bucket_fs.connection_options)."""
    from storage.bucket_fs import url_filesystem

    return url_filesystem(url, options)


def key(root: str, rel: str) -> str:
    return f"{root.rstrip('/')}/{rel}"


def _record_path(local_root: Path, rel: str) -> Path:
    return local_root / RECORDS / (hashlib.sha256(rel.encode()).hexdigest()[:32] + ".json")


def remember(local_root: Path, rel: str, sha256: str) -> None:
    """Record that the local file `rel` now holds the bytes with `sha256`."""
    stat = (local_root / rel).stat()
    record = _record_path(local_root, rel)
    record.parent.mkdir(parents=True, exist_ok=True)
    temporary = record.with_name(f"{record.name}.{uuid.uuid4().hex}")
    temporary.write_text(json.dumps({"rel": rel, "size": stat.st_size, "mtime_ns": stat.st_mtime_ns,
                                     "sha256": sha256}))
    os.replace(temporary, record)  # two tasks of one node may record one file at once


def holds(local_root: Path, rel: str, size: int, sha256: str) -> bool:
    """Whether the local file `rel` holds the bytes `sha256` (by its record)."""
    try:
        stat = (local_root / rel).stat()
        record = json.loads(_record_path(local_root, rel).read_text())
    except (OSError, ValueError):
        return False
    return (record.get("rel") == rel and record.get("sha256") == sha256 and stat.st_size == size
            and record.get("size") == size and record.get("mtime_ns") == stat.st_mtime_ns)


class UnexpectedBytes(RuntimeError):
    """A downloaded object does not have the sha256 it was named with."""

    def __init__(self, key: str, found: str, expected: str):
        what = found if found.startswith("(") else f"(sha256 {found[:12]}..., expected {expected[:12]}...)"
        super().__init__(
            f"{key} changed in the bucket after the driver listed it {what}: two tasks rewrote one file of "
            f"the stage, or another driver writes this stage; run the stage again")
        self.key, self.found, self.expected = key, found, expected


def download(fs, root: str, local_root: Path, wanted: list[tuple[str, str]],
             sizes: dict[str, int] | None = None) -> None:
    """Fetch the files `wanted` ((rel, sha256) pairs) into the local mirror, all in one
    call (s3fs and gcsfs fetch a list concurrently), each under a temporary name that is
    renamed only once its bytes have the size (from `sizes`, when known: no hashing of a
    file that cannot match) and the digest named: a task killed mid-download never
    leaves a short file that looks fetched, and bytes that changed in the bucket since the
    driver listed them are refused."""
    if not wanted:
        return
    sizes = sizes or {}
    partials = []
    for rel, _ in wanted:
        local = local_root / rel
        local.parent.mkdir(parents=True, exist_ok=True)
        partials.append(local.with_name(f".{local.name}.{uuid.uuid4().hex}.partial"))
    try:
        fs.get([key(root, rel) for rel, _ in wanted], [str(p) for p in partials])
        for (rel, sha256), partial in zip(wanted, partials):
            if rel in sizes and (found_size := partial.stat().st_size) != sizes[rel]:
                raise UnexpectedBytes(key(root, rel), f"(a file of {found_size} bytes, not {sizes[rel]})", sha256)
            if (found := sha256_file(partial)) != sha256:
                raise UnexpectedBytes(key(root, rel), found, sha256)
        for (rel, sha256), partial in zip(wanted, partials):
            os.replace(partial, local_root / rel)
            remember(local_root, rel, sha256)
    finally:
        for partial in partials:
            partial.unlink(missing_ok=True)


def upload(fs, root: str, local_root: Path, rels: list[str]) -> list[tuple[int, str]]:
    """Put the local files `rels` under the same names in the bucket, in one call; their
    (size, sha256), in order."""
    if not rels:
        return []
    states = []
    for rel in rels:
        digest = sha256_file(local_root / rel)
        states.append(((local_root / rel).stat().st_size, digest))
    fs.put([str(local_root / rel) for rel in rels], [key(root, rel) for rel in rels])
    for rel, (_, digest) in zip(rels, states):
        remember(local_root, rel, digest)
    return states


def starts_with(path: Path, size: int, sha256: str) -> bool:
    """Whether the file's first `size` bytes have that digest (it was only appended to)."""
    if path.stat().st_size < size:
        return False
    with open(path, "rb") as f:
        return sha256_stream(f, limit=size) == sha256


def upload_tail(fs, root: str, local_root: Path, rel: str, offset: int, tail_rel: str) -> tuple[int, str]:
    """Put the local file's bytes from `offset` on under `tail_rel`; the whole file's
    (size, sha256)."""
    local = local_root / rel
    with open(local, "rb") as f:
        f.seek(offset)
        fs.pipe_file(key(root, tail_rel), f.read())
    return local.stat().st_size, sha256_file(local)


def append_object(fs, root: str, tail_rel: str, local: Path) -> None:
    """Append the object `tail_rel` to the local file, then delete the object."""
    data = fs.cat_file(key(root, tail_rel))
    with open(local, "ab") as f:
        f.write(data)
    fs.rm_file(key(root, tail_rel))

def copy_checked(fs, root: str, local_root: Path, private_root: Path, rel: str, sha256: str) -> None:
    """Copy the node's file `rel` into a task's private folder, with the bytes `sha256`:
    another task of the node may have replaced the node's copy since it was checked, and
    then this one is fetched from the bucket again."""
    import shutil

    target = private_root / rel
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(local_root / rel, target)
    if sha256_file(target) != sha256:
        target.unlink()
        download(fs, root, private_root, [(rel, sha256)])


def link_checked(fs, root: str, local_root: Path, private_root: Path, rel: str, sha256: str) -> None:
    """As copy_checked, for a file written once and only read (a bulk file: a shard,
    a dedup entry file): a hard link, so a task reading many of them copies nothing.
    The link is the node's copy only while that copy's record still names `sha256` with
    the linked file's size and mtime; if another task replaced it meanwhile (a new
    inode), the bytes are fetched from the bucket again."""
    import shutil

    target = private_root / rel
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(local_root / rel, target)
    except OSError:  # another file system, or links not allowed: a copy
        shutil.copy2(local_root / rel, target)
    try:
        stat = target.stat()
        record = json.loads(_record_path(local_root, rel).read_text())
        same = (record.get("rel") == rel and record.get("sha256") == sha256
                and (record.get("size"), record.get("mtime_ns")) == (stat.st_size, stat.st_mtime_ns))
    except (OSError, ValueError):
        same = False
    if not same:
        target.unlink()
        download(fs, root, private_root, [(rel, sha256)])


def task_folder(local_root: Path) -> Path:
    """A new private folder for a task of this process (named by its pid)."""
    return local_root / RECORDS / "tasks" / f"{os.getpid()}-{uuid.uuid4().hex}"


def remove_dead_task_folders(local_root: Path) -> None:
    """The private folders of tasks whose process is gone (killed before its `finally`
    ran: a node lost its worker, a driver was SIGKILLed). A live process's folder stays,
    however long its task runs."""
    import shutil

    import psutil

    tasks = local_root / RECORDS / "tasks"
    for folder in tasks.iterdir() if tasks.is_dir() else ():
        pid = folder.name.split("-", 1)[0]
        if pid.isdigit() and not psutil.pid_exists(int(pid)):
            shutil.rmtree(folder, ignore_errors=True)


def keep(private_root: Path, local_root: Path, rel: str, sha256: str) -> None:
    """Move an uploaded file from a task's private folder into the node's mirror."""
    target = local_root / rel
    target.parent.mkdir(parents=True, exist_ok=True)
    os.replace(private_root / rel, target)
    remember(local_root, rel, sha256)


def log_work(local_root: Path, stage_rel: str, **counts: int) -> None:
    log = local_root / RECORDS / "work.jsonl"
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "a", encoding="utf-8") as f:  # one short line per write: appends stay whole
        f.write(json.dumps({"stage": stage_rel, "pid": os.getpid(), **counts}) + "\n")
