"""The stage lease on a real S3 server (moto's, over HTTP; conditional puts are the
server's): one holder at a time, kept alive by its heartbeat, taken over when silent
(by one of two drivers racing for it), and a holder that lost it can neither commit
nor delete the new holder's lease. Short heartbeat and stale times keep this to a few
seconds; the server's clock has one-second resolution, hence the margins."""

from __future__ import annotations

import itertools
import os
import socket
import subprocess
import sys
import threading
import time

import pytest

from storage.object_keys import ObjectKeys, filesystem, json_bytes
from storage.object_lease import ObjectLease, peek_lease
from storage.writer_lock import StageLocked
from tests.support.lease_race import race
from tests.support.s3_server import make_bucket

_keys = itertools.count()
_bucket: list[str] = []  # the module's bucket name, set by the fs fixture


@pytest.fixture(scope="module")
def fs(s3_endpoint):
    url = make_bucket("lease-test")
    _bucket[:] = [url.removeprefix("s3://")]
    return filesystem(url)[0]


def lock_key() -> str:
    return f"{_bucket[0]}/runs/x/pretrain/.fp{next(_keys):04d}.lock"


@pytest.fixture
def key(fs) -> str:
    return lock_key()


def lease(fs, key, messages: list | None = None, **kwargs) -> ObjectLease:
    echo = messages.append if messages is not None else (lambda *_: None)
    return ObjectLease(fs, key, what="stage 'pretrain' (fp)", echo=echo, **kwargs)




def test_a_waiting_driver_gets_the_lease_when_the_holder_releases(fs, key):
    first = lease(fs, key)
    first.acquire()
    letting_go = threading.Event()

    def release():
        letting_go.set()  # before the release: whoever gets in after it sees the flag
        first.release()

    threading.Timer(1.0, release).start()
    messages: list[str] = []
    with lease(fs, key, messages, wait=True, poll_seconds=0.1):
        assert letting_go.is_set()  # we only got in after the holder let go
    assert any(m.startswith("waiting for stage 'pretrain' (fp): leased by pid") for m in messages), messages


def test_the_heartbeat_keeps_a_lease_alive_past_the_stale_time(fs, key):
    with lease(fs, key, heartbeat_seconds=0.3) as holder:
        time.sleep(3.5)  # > stale_seconds=2 below: without beats the lease would be stale
        messages: list[str] = []
        with pytest.raises(StageLocked, match="being written by"):
            lease(fs, key, messages, stale_seconds=2).acquire()
        assert peek_lease(fs, key, stale_seconds=2)["pid"] == os.getpid()
        assert not any("taking over" in m for m in messages)
        holder.check_held()
    assert ObjectKeys(fs).read(key) is None


def test_a_silent_lease_is_taken_over_by_one_driver_and_its_old_holder_cannot_commit(fs):
    # Two silent holders at once (one sleep for both): the first notices its loss at its
    # next heartbeat, the second has no heartbeat before it releases.
    noticing, oblivious = (lock_key() for _ in range(2))
    noticing_messages: list[str] = []
    old = lease(fs, noticing, noticing_messages, heartbeat_seconds=5)
    old.acquire()
    old_oblivious = lease(fs, oblivious, heartbeat_seconds=1000)
    old_oblivious.acquire()
    time.sleep(2.5)  # > stale_seconds=1 by the server's clock

    assert peek_lease(fs, noticing, stale_seconds=1) is None  # stale: `plan` shows no holder
    assert peek_lease(fs, noticing)["pid"] == os.getpid()     # live at the default 60 s

    # Two drivers take over at once: exactly one wins (If-Match on the stale etag).
    contender_messages: list[list[str]] = [[], []]
    contenders = [lease(fs, noticing, contender_messages[i], stale_seconds=1) for i in range(2)]
    outcomes = race(contenders)
    assert sorted(map(str, outcomes)).count("won") == 1, outcomes
    winner = contenders[outcomes.index("won")]
    said = contender_messages[outcomes.index("won")]
    assert any(m.startswith("warning: stage 'pretrain' (fp): taking over the lease left by pid")
               and "silent for" in m for m in said), said

    # The old holder's next heartbeat fails: it must not commit, and leaves the lease be.
    assert old.lost.wait(timeout=10), "the old holder's heartbeat did not notice the take-over"
    assert any("lost the lease" in m for m in noticing_messages), noticing_messages
    with pytest.raises(StageLocked, match="was taken over by another driver"):
        old.check_held()
    winner.check_held()
    old.release()
    current = ObjectKeys(fs).read(noticing)
    assert current is not None and current.etag == winner._etag

    # A holder that has not noticed yet: its release's delete is fenced by its old etag.
    taker = lease(fs, oblivious, stale_seconds=1)
    taker.acquire()
    old_oblivious.release()
    current = ObjectKeys(fs).read(oblivious)
    assert current is not None and current.etag == taker._etag
    for holder in (winner, taker):
        holder.release()
    assert ObjectKeys(fs).read(noticing) is None and ObjectKeys(fs).read(oblivious) is None


def test_peek_lease_of_no_lease_is_none(fs, key):
    assert peek_lease(fs, key) is None


def test_a_lease_left_by_a_dead_process_on_this_host_is_taken_over_at_once(fs, key):
    """A SIGKILLed driver's lease is not stale yet, but its holder is gone: rerunning the
    same command on the same machine takes it over at once (as the local workdir's
    lock does for a dead holder on this host) instead of refusing for up to 60 s."""
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    record = {"host": socket.gethostname(), "pid": int(dead.stdout), "since": time.time()}
    ObjectKeys(fs).create(key, json_bytes(record))
    messages: list[str] = []
    with lease(fs, key, messages) as taker:
        taker.check_held()
    assert any("taking over the lease left by pid" in m for m in messages), messages
