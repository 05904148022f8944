"""One writer per stage: the loop both stage locks share (storage.stage_lock on a local
or mounted disk, storage.object_lease in a bucket).

    with lock:   # acquire: take it, or wait (--wait-lock) or refuse naming the holder
        ...      # a heartbeat thread renews it while the stage runs
                 # release: give it back, only if it is still ours

A subclass says how to take it once (`_try_acquire`: None when taken, else the holder's
record) and how to renew it once (`_renew`); this base owns the waiting, the refusal, the
heartbeat thread and the rule for when a holder is dead (`is_stale`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
import os
import socket
import threading
import time
from datetime import datetime

from storage.errors import ConfigError

HEARTBEAT_SECONDS = 10.0
STALE_SECONDS = 60.0


class StageLocked(ConfigError):
    """Another driver is writing this stage (exit 2, like a usage mistake)."""


def describe_holder(holder: dict | None) -> str:
    if not holder:
        return "another process (no holder recorded yet)"
    since = datetime.fromtimestamp(holder.get("since", 0)).strftime("%Y-%m-%d %H:%M:%S")
    return f"pid {holder.get('pid')} on host {holder.get('host')} since {since}"


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by someone else
    return True


def holder_is_stale(holder: dict | None, age_seconds: float | None, stale_seconds: float, *,
                    fenced: bool) -> bool:
    """Whether a lock's holder is dead. A process of this host that no longer exists is
    dead at once (a killed driver's rerun need not wait out the heartbeat). Otherwise a
    heartbeat older than stale_seconds says dead, except for a live process of this host
    when the lock is not fenced: an unfenced holder never learns it lost the lock and
    would go on writing, so only its death frees it."""
    if holder and holder.get("host") == socket.gethostname() and isinstance(holder.get("pid"), int):
        if not pid_alive(holder["pid"]):
            return True
        if not fenced:
            return False
    return age_seconds is not None and age_seconds > stale_seconds


class WriterLock(ABC):
    noun, held = "lock", "locked"  # in messages: "(lock PATH)", "locked by"
    fenced = False         # whether a holder learns it was taken over (see holder_is_stale)

    def __init__(self, path, *, what: str, wait: bool = False, echo=print, poll_seconds: float = 1.0,
                 report_seconds: float = 30.0, heartbeat_seconds: float = HEARTBEAT_SECONDS,
                 stale_seconds: float = STALE_SECONDS):
        self.path = path
        self.what = what  # "stage 'ingest' (0123abcd)", for messages
        self.wait = wait
        self.echo = echo
        self.poll_seconds = poll_seconds
        self.report_seconds = report_seconds
        self.heartbeat_seconds = heartbeat_seconds
        self.stale_seconds = stale_seconds
        self.me = {"host": socket.gethostname(), "pid": os.getpid(), "since": time.time()}
        self._stop = threading.Event()
        self._heartbeat: threading.Thread | None = None

    @abstractmethod
    def _try_acquire(self) -> dict | None:
        """Take the lock once: None when we hold it now, else the holder's record."""

    @abstractmethod
    def _renew(self) -> bool:
        """One heartbeat; False when the lock is no longer ours (the heartbeat stops)."""

    def acquire(self) -> None:
        last_report = 0.0
        while True:
            holder = self._try_acquire()
            if holder is None:
                return
            if not self.wait:
                raise StageLocked(
                    f"{self.what} is being written by {describe_holder(holder)} ({self.noun} {self.path}); "
                    f"wait for that run to finish, stop it, or pass --wait-lock to wait for it")
            if time.monotonic() - last_report >= self.report_seconds:
                self.echo(f"waiting for {self.what}: {self.held} by {describe_holder(holder)} ({self.path})")
                last_report = time.monotonic()
            time.sleep(self.poll_seconds)

    def is_stale(self, holder: dict | None, age_seconds: float | None) -> bool:
        return holder_is_stale(holder, age_seconds, self.stale_seconds, fenced=self.fenced)

    def _start_heartbeat(self) -> None:
        self._heartbeat = threading.Thread(target=self._beat, name=f"stage-{self.noun}-heartbeat", daemon=True)
        self._heartbeat.start()

    def _beat(self) -> None:
        while not self._stop.wait(self.heartbeat_seconds):
            if not self._renew():
                return

    def _stop_heartbeat(self) -> bool:
        """Stop the heartbeat; whether there was one."""
        if self._heartbeat is None:
            return False
        self._stop.set()
        self._heartbeat.join()
        self._heartbeat = None
        return True

    @abstractmethod
    def release(self) -> None:
        """Give the lock up (the subclass removes its file or object)."""

    def check_held(self) -> None:
        """Raise StageLocked unless we still hold it (right before the manifest commit)."""

    def __enter__(self):
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()
