"""One writer per stage directory: an OS-level lock beside `<workdir>/<stage>/<fp>/`.

    with StageLock(workdir / "ingest" / ".0123abcd.lock", wait=False, echo=print):
        ...   # prepare the directory, run the stage, write the manifest

Two ways to hold it, chosen by the file system the workdir is on:

- `flock` (local disks): `fcntl.flock` on the lock file. The kernel drops the lock when
  its holder dies, however it dies, so a lock is never left behind.
- `file` (NFS and other network file systems, where flock may be emulated per client or
  not at all): the lock file is created with O_CREAT|O_EXCL, holds its holder, and a
  thread touches it every HEARTBEAT_SECONDS. A lock whose holder is a dead process on
  this host, or whose heartbeat is older than STALE_SECONDS, is taken over with a
  warning (the acquire / heartbeat / stale loop is storage.writer_lock's, shared with
the object lease).

Either way the file records host, pid and start time, so a second driver's error names
the holder. PRETRAIN_LOCK_MODE=flock|file overrides the choice.
"""

from __future__ import annotations

import errno
import json
import os
import time
from pathlib import Path

from storage.mounts import is_network_mount
from storage.writer_lock import WriterLock, describe_holder


def lock_mode(path: Path) -> str:
    forced = os.environ.get("PRETRAIN_LOCK_MODE")
    if forced in ("flock", "file"):
        return forced
    return "file" if is_network_mount(path) else "flock"


def read_holder(path: Path) -> dict | None:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8") or "null")
        return data if isinstance(data, dict) else None
    except (OSError, ValueError):
        return None


class StageLock(WriterLock):
    def __init__(self, path: Path, **options):
        super().__init__(Path(path), **options)
        self.mode = lock_mode(self.path.parent if self.path.parent.exists() else Path("."))
        self._fd: int | None = None

    def acquire(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        super().acquire()

    def _try_acquire(self) -> dict | None:
        return self._try_flock() if self.mode == "flock" else self._try_exclusive_file()

    def _try_flock(self) -> dict | None:
        import fcntl

        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as error:
            os.close(fd)
            if error.errno in (errno.EAGAIN, errno.EACCES):
                return read_holder(self.path) or {}
            raise
        previous = read_holder(self.path)
        if previous and previous.get("pid") != os.getpid():
            # The kernel released it when the holder died; say so, the directory may hold
            # that holder's partial output (the stage resumes from it or clears it).
            self.echo(f"warning: {self.what}: taking over the lock left by {describe_holder(previous)}, "
                      "which has ended")
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(self.me).encode(), 0)
        os.fsync(fd)
        self._fd = fd
        return None

    def _try_exclusive_file(self) -> dict | None:
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            holder = read_holder(self.path)
            if self._is_stale(holder):
                self.echo(f"warning: {self.what}: taking over a stale lock ({self.path}) left by "
                          f"{describe_holder(holder)}")
                self._remove_if_unchanged(holder)
                return self._try_exclusive_file()
            return holder or {}
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(self.me, f)
            f.flush()
            os.fsync(f.fileno())
        self._start_heartbeat()
        return None

    def _is_stale(self, holder: dict | None) -> bool:
        try:
            age = time.time() - self.path.stat().st_mtime
        except FileNotFoundError:
            return True
        return self.is_stale(holder, age)

    def _remove_if_unchanged(self, holder: dict | None) -> None:
        # Between our read and this unlink another driver may have taken it over; only
        # remove the lock we judged stale.
        if read_holder(self.path) == holder:
            self.path.unlink(missing_ok=True)

    def _renew(self) -> bool:
        try:
            os.utime(self.path)
        except OSError:
            pass
        return True

    def release(self) -> None:
        if self._fd is not None:
            import fcntl

            os.ftruncate(self._fd, 0)  # an empty record = released cleanly (no warning next time)
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None
        if self._stop_heartbeat() and read_holder(self.path) == self.me:
            self.path.unlink(missing_ok=True)


def peek_holder(path: Path) -> dict | None:
    """The live holder of a stage lock, or None when nobody holds it (for `plan`)."""
    path = Path(path)
    if not path.exists():
        return None
    if lock_mode(path.parent) == "flock":
        import fcntl

        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError:
            return read_holder(path) or {}
        finally:
            os.close(fd)  # closing drops our shared lock, if we got it
        return None
    holder = read_holder(path)
    probe = StageLock(path, what="")
    return None if probe._is_stale(holder) else holder
