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
  warning.

Either way the file records host, pid and start time, so a second driver's error names
the holder. PRETRAIN_LOCK_MODE=flock|file overrides the choice.
"""

from __future__ import annotations

import errno
import json
import os
import socket
import threading
import time
from datetime import datetime
from pathlib import Path

from storage.errors import ConfigError
from storage.mounts import is_network_mount

HEARTBEAT_SECONDS = 10.0
STALE_SECONDS = 60.0


class StageLocked(ConfigError):
    """Another driver is writing this stage directory (exit 2, like a usage mistake)."""


def describe_holder(holder: dict | None) -> str:
    if not holder:
        return "another process (no holder recorded yet)"
    since = datetime.fromtimestamp(holder.get("since", 0)).strftime("%Y-%m-%d %H:%M:%S")
    return f"pid {holder.get('pid')} on host {holder.get('host')} since {since}"


def lock_mode(path: Path) -> str:
    forced = os.environ.get("PRETRAIN_LOCK_MODE")
    if forced in ("flock", "file"):
        return forced
    return "file" if is_network_mount(path) else "flock"


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by someone else
    return True


def read_holder(path: Path) -> dict | None:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8") or "null")
        return data if isinstance(data, dict) else None
    except (OSError, ValueError):
        return None


class StageLock:
    def __init__(self, path: Path, *, what: str, wait: bool = False, echo=print,
                 poll_seconds: float = 1.0, report_seconds: float = 30.0):
        self.path = Path(path)
        self.what = what  # "stage 'ingest' (0123abcd)", for messages
        self.wait = wait
        self.echo = echo
        self.poll_seconds = poll_seconds
        self.report_seconds = report_seconds
        self.mode = lock_mode(self.path.parent if self.path.parent.exists() else Path("."))
        self._fd: int | None = None
        self._stop = threading.Event()
        self._heartbeat: threading.Thread | None = None
        self.me = {"host": socket.gethostname(), "pid": os.getpid(), "since": time.time()}

    # -- acquire / release -------------------------------------------------------------
    def acquire(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        last_report = 0.0
        while True:
            holder = self._try_acquire()
            if holder is None:
                return
            if not self.wait:
                raise StageLocked(
                    f"{self.what} is being written by {describe_holder(holder)} (lock {self.path}); "
                    f"wait for that run to finish, stop it, or pass --wait-lock to wait for it")
            if time.monotonic() - last_report >= self.report_seconds:
                self.echo(f"waiting for {self.what}: locked by {describe_holder(holder)} ({self.path})")
                last_report = time.monotonic()
            time.sleep(self.poll_seconds)

    def _try_acquire(self) -> dict | None:
        """None when we hold the lock now, else the holder's record."""
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
        self._heartbeat = threading.Thread(target=self._beat, name="stage-lock-heartbeat", daemon=True)
        self._heartbeat.start()
        return None

    def _is_stale(self, holder: dict | None) -> bool:
        try:
            age = time.time() - self.path.stat().st_mtime
        except FileNotFoundError:
            return True
        if holder and holder.get("host") == socket.gethostname() and isinstance(holder.get("pid"), int):
            return not pid_alive(holder["pid"])
        return age > STALE_SECONDS  # another host (or unreadable): only a silent heartbeat says dead

    def _remove_if_unchanged(self, holder: dict | None) -> None:
        # Between our read and this unlink another driver may have taken it over; only
        # remove the lock we judged stale.
        if read_holder(self.path) == holder:
            self.path.unlink(missing_ok=True)

    def _beat(self) -> None:
        while not self._stop.wait(HEARTBEAT_SECONDS):
            try:
                os.utime(self.path)
            except OSError:
                pass

    def release(self) -> None:
        if self._fd is not None:
            import fcntl

            os.ftruncate(self._fd, 0)  # an empty record = released cleanly (no warning next time)
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None
        if self._heartbeat is not None:
            self._stop.set()
            self._heartbeat.join()
            self._heartbeat = None
            if read_holder(self.path) == self.me:
                self.path.unlink(missing_ok=True)

    def check_held(self) -> None:
        """A local lock cannot be lost while its holder lives (the object lease can)."""

    def __enter__(self) -> "StageLock":
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()


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
