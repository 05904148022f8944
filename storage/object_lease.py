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

The waiting, the heartbeat thread and the staleness rule are storage.writer_lock's,
shared with the local stage lock.
"""

from __future__ import annotations

import json
import threading

from storage.object_keys import ObjectKeys, PreconditionFailed, json_bytes
from storage.writer_lock import (HEARTBEAT_SECONDS, STALE_SECONDS, StageLocked, WriterLock, describe_holder,
                                  holder_is_stale)


class ObjectLease(WriterLock):
    noun, held = "lease", "leased"
    fenced = True  # a holder taken over learns it at its next heartbeat and does not commit

    def __init__(self, fs, path: str, *, heartbeat_seconds: float | None = None, **options):
        # Read when the lease is made, not when this module loads: a test of the engine
        # can shorten the beat for the stores the runner opens.
        super().__init__(path, heartbeat_seconds=HEARTBEAT_SECONDS if heartbeat_seconds is None
                         else heartbeat_seconds, **options)
        self.keys = ObjectKeys(fs)
        self.lost = threading.Event()
        self._etag: str | None = None

    def acquire(self) -> None:
        super().acquire()
        self._start_heartbeat()

    def _try_acquire(self) -> dict | None:
        try:
            self._etag = self.keys.create(self.path, json_bytes(self.me))
            return None
        except PreconditionFailed:
            pass
        current = self.keys.read(self.path)
        if current is None:
            return self._try_acquire()  # released between our create and our read
        holder = _parse(current.data)
        if not self.is_stale(holder, current.age_seconds):
            return holder or {}
        try:
            self._etag = self.keys.replace(self.path, json_bytes(self.me), current.etag)
        except PreconditionFailed:
            return holder or {}  # another driver took it over first
        silent = f"silent for {current.age_seconds:.0f} s" if current.age_seconds is not None else "silent"
        self.echo(f"warning: {self.what}: taking over the lease left by {describe_holder(holder)}, "
                  f"which has ended ({silent}; {self.path})")
        return None

    def _renew(self) -> bool:
        try:
            self._etag = self.keys.replace(self.path, json_bytes(self.me), self._etag)
        except PreconditionFailed:
            self.lost.set()
            self.echo(f"warning: {self.what}: lost the lease {self.path} (another driver took it "
                      f"over); this driver will not commit the stage")
            return False
        except OSError as error:  # a network blip: try again at the next beat
            self.echo(f"warning: {self.what}: lease heartbeat failed ({error}); retrying")
        return True

    def check_held(self) -> None:
        """Raise unless we still hold the lease (called right before the manifest commit)."""
        if self.lost.is_set():
            raise StageLocked(f"{self.what}: the lease {self.path} was taken over by another driver "
                              f"while this one ran; its output is not committed")

    def release(self) -> None:
        self._stop_heartbeat()
        if self._etag is not None and not self.lost.is_set():
            try:
                self.keys.delete(self.path, self._etag)
            except PreconditionFailed:
                pass  # someone took it over; it is theirs now
            self._etag = None


def peek_lease(fs, path: str, stale_seconds: float = STALE_SECONDS) -> dict | None:
    """The live holder of a lease, or None (no lease, or a stale one), for `plan`."""
    current = ObjectKeys(fs).read(path)
    if current is None:
        return None
    holder = _parse(current.data)
    stale = holder_is_stale(holder, current.age_seconds, stale_seconds, fenced=ObjectLease.fenced)
    return None if stale else holder or {}


def _parse(data: bytes) -> dict | None:
    try:
        value = json.loads(data or b"null")
    except ValueError:
        return None
    return value if isinstance(value, dict) else None
