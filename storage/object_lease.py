"""One writer per stage on an object store: a lease object beside the stage's prefix.

    with ObjectLease(fs, "bucket/runs/x/ingest/.0123abcd.lock", what=..., wait=False):
        ...   # prepare, run the stage, upload, commit the manifest

The stage lock of a local workdir (storage.stage_lock) leans on flock or O_EXCL; an
object store has neither, but it has compare-and-swap on one key (storage.object_keys).
Below, "etag" is S3's ETag (If-None-Match / If-Match) or GCS's generation
(ifGenerationMatch=0 / ifGenerationMatch=<generation>):

- Take: create the lease key only if it is absent. Exactly one driver succeeds.
- Hold: rewrite it every HEARTBEAT_SECONDS only if it still has our last etag. The
  rewrite moves the key's modification time; if it fails, someone took the lease over (we
  were silent for longer than STALE_SECONDS), and `lost` is set: the store then refuses
  to commit the manifest, so two drivers never both finish one stage.
- Stale: a lease whose modification time (S3 Last-Modified, GCS `updated`) is more than
  STALE_SECONDS old by the server's own clock (its Date header, so clock skew between
  drivers does not matter) is dead. It is taken over by a rewrite conditional on the
  stale etag, so of two drivers taking over at once one wins.
- Release: delete only if it still has our etag, so a lease someone else took is left
  alone.

S3 and GCS enforce each of these on the server. (On GCS the release also reads the
generation before its DELETE, because an emulator may not enforce the delete's
condition: fake-gcs-server does not; see object_store._gcs_delete.) On other file
systems `create` is fsspec's exclusive "xb" mode where the file system has one;
heartbeats and take-overs are then not fenced (a read, then a write).
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time

from storage.object_keys import ObjectKeys, PreconditionFailed, json_bytes
from storage.stage_lock import StageLocked, pid_alive, describe_holder

HEARTBEAT_SECONDS = 10.0
STALE_SECONDS = 60.0


class ObjectLease:
    def __init__(self, fs, path: str, *, what: str, wait: bool = False, echo=print,
                 poll_seconds: float = 1.0, report_seconds: float = 30.0,
                 heartbeat_seconds: float | None = None, stale_seconds: float = STALE_SECONDS):
        self.keys = ObjectKeys(fs)
        self.path = path
        self.what = what
        self.wait = wait
        self.echo = echo
        self.poll_seconds = poll_seconds
        self.report_seconds = report_seconds
        # Read when the lease is made, not when this module loads: a test of the engine
        # can shorten the beat for the stores the runner opens.
        self.heartbeat_seconds = HEARTBEAT_SECONDS if heartbeat_seconds is None else heartbeat_seconds
        self.stale_seconds = stale_seconds
        self.me = {"host": socket.gethostname(), "pid": os.getpid(), "since": time.time()}
        self.lost = threading.Event()
        self._etag: str | None = None
        self._stop = threading.Event()
        self._heartbeat: threading.Thread | None = None

    def acquire(self) -> None:
        last_report = 0.0
        while True:
            holder = self._try_acquire()
            if holder is None:
                self._heartbeat = threading.Thread(target=self._beat, name="object-lease-heartbeat",
                                                   daemon=True)
                self._heartbeat.start()
                return
            if not self.wait:
                raise StageLocked(
                    f"{self.what} is being written by {describe_holder(holder)} (lease {self.path}); "
                    f"wait for that run to finish, stop it, or pass --wait-lock to wait for it")
            if time.monotonic() - last_report >= self.report_seconds:
                self.echo(f"waiting for {self.what}: leased by {describe_holder(holder)} ({self.path})")
                last_report = time.monotonic()
            time.sleep(self.poll_seconds)

    def _try_acquire(self) -> dict | None:
        """None when we hold the lease now, else the holder's record."""
        try:
            self._etag = self.keys.create(self.path, json_bytes(self.me))
            return None
        except PreconditionFailed:
            pass
        current = self.keys.read(self.path)
        if current is None:
            return self._try_acquire()  # released between our create and our read
        holder = _parse(current.data)
        if not is_stale(holder, current.age_seconds, self.stale_seconds):
            return holder or {}
        try:
            self._etag = self.keys.replace(self.path, json_bytes(self.me), current.etag)
        except PreconditionFailed:
            return holder or {}  # another driver took it over first
        silent = f"silent for {current.age_seconds:.0f} s" if current.age_seconds is not None else "silent"
        self.echo(f"warning: {self.what}: taking over the lease left by {describe_holder(holder)}, "
                  f"which has ended ({silent}; {self.path})")
        return None

    def _beat(self) -> None:
        while not self._stop.wait(self.heartbeat_seconds):
            try:
                self._etag = self.keys.replace(self.path, json_bytes(self.me), self._etag)
            except PreconditionFailed:
                self.lost.set()
                self.echo(f"warning: {self.what}: lost the lease {self.path} (another driver took it "
                          f"over); this driver will not commit the stage")
                return
            except OSError as error:  # a network blip: try again at the next beat
                self.echo(f"warning: {self.what}: lease heartbeat failed ({error}); retrying")

    def check_held(self) -> None:
        """Raise unless we still hold the lease (called right before the manifest commit)."""
        if self.lost.is_set():
            raise StageLocked(f"{self.what}: the lease {self.path} was taken over by another driver "
                              f"while this one ran; its output is not committed")

    def release(self) -> None:
        if self._heartbeat is not None:
            self._stop.set()
            self._heartbeat.join()
            self._heartbeat = None
        if self._etag is not None and not self.lost.is_set():
            try:
                self.keys.delete(self.path, self._etag)
            except PreconditionFailed:
                pass  # someone took it over; it is theirs now
            self._etag = None

    def __enter__(self) -> "ObjectLease":
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def peek_lease(fs, path: str, stale_seconds: float = STALE_SECONDS) -> dict | None:
    """The live holder of a lease, or None (no lease, or a stale one), for `plan`."""
    current = ObjectKeys(fs).read(path)
    if current is None:
        return None
    holder = _parse(current.data)
    return None if is_stale(holder, current.age_seconds, stale_seconds) else holder or {}


def is_stale(holder: dict | None, age_seconds: float | None, stale_seconds: float) -> bool:
    """A lease is dead when its holder is a process of this host that no longer exists
    (a killed driver's rerun need not wait out the heartbeat), or when its heartbeat is
    older than stale_seconds by the server's clock."""
    if holder and holder.get("host") == socket.gethostname() and isinstance(holder.get("pid"), int):
        if holder["pid"] != os.getpid() and not pid_alive(holder["pid"]):
            return True
    return age_seconds is not None and age_seconds > stale_seconds


def _parse(data: bytes) -> dict | None:
    try:
        value = json.loads(data or b"null")
    except ValueError:
        return None
    return value if isinstance(value, dict) else None
