"""gs:// on a GCS emulator on loopback (fake-gcs-server, over HTTP; gcsfs and pyarrow
unmocked): the generation preconditions ObjectKeys sends are the server's (a create is
exclusive, a stale generation cannot overwrite or delete), and a stage lease is taken
over when silent, and a holder that lost it leaves the new holder's lease alone. What S3
and GCS share (the store's commit, fetch and damage checks, one lease holder at a time)
is test_bucket_backends.py, run against both."""

from __future__ import annotations

import itertools
import json
import os
import time
import urllib.parse
import urllib.request

import pytest

from storage.object_keys import ObjectKeys, PreconditionFailed, filesystem
from storage.object_lease import ObjectLease, peek_lease
from storage.writer_lock import StageLocked
from tests.support.gcs_server import make_gcs_bucket
from tests.support.lease_race import race
from tests.support.stage_files import FILES, finished_stage

_names = itertools.count()


@pytest.fixture
def bucket(gcs_endpoint, tmp_path, monkeypatch) -> str:
    monkeypatch.setenv("PRETRAIN_MIRROR", str(tmp_path / "mirror"))
    return make_gcs_bucket(f"gcs-store-test-{next(_names)}")


def _server(path: str, **query) -> str:
    return f"{os.environ['STORAGE_EMULATOR_HOST']}{path}?{urllib.parse.urlencode(query)}"


def objects(url: str) -> dict[str, bytes]:
    """Every object under `url`, read straight from the server's JSON API (no gcsfs)."""
    bucket, _, prefix = url[len("gs://"):].partition("/")
    with urllib.request.urlopen(_server(f"/storage/v1/b/{bucket}/o", prefix=prefix)) as response:
        names = [item["name"] for item in json.load(response).get("items", [])]
    found = {}
    for name in names:
        quoted = urllib.parse.quote(name, safe="")
        with urllib.request.urlopen(_server(f"/storage/v1/b/{bucket}/o/{quoted}", alt="media")) as response:
            found[name] = response.read()
    return found


def put_object(url: str, data: bytes) -> None:
    """Overwrite an object behind the store's back, as another program would."""
    bucket, _, key = url[len("gs://"):].partition("/")
    request = urllib.request.Request(_server(f"/upload/storage/v1/b/{bucket}/o", uploadType="media", name=key),
                                     data=data, method="POST",
                                     headers={"Content-Type": "application/octet-stream"})
    urllib.request.urlopen(request).close()


# -- the preconditions --------------------------------------------------------------------
def test_a_create_is_exclusive_and_a_read_gives_the_generation_by_the_servers_clock(bucket):
    fs, root = filesystem(bucket)
    keys = ObjectKeys(fs)
    assert keys.is_gcs and not keys.is_s3
    path = f"{root}/runs/a/manifest.json"
    before_create = time.monotonic()
    generation = keys.create(path, b"first")
    with pytest.raises(PreconditionFailed):
        keys.create(path, b"second")
    current = keys.read(path)
    since_create = time.monotonic() - before_create
    assert current.data == b"first" and current.etag == generation
    # The server's Date (whole seconds, cut down) minus the object's time: at most the
    # time since the create, at least -1 s.
    assert -1.05 < current.age_seconds < since_create + 0.05
    assert keys.read(f"{root}/runs/a/absent") is None


def test_replace_and_delete_need_the_current_generation(bucket):
    fs, root = filesystem(bucket)
    keys = ObjectKeys(fs)
    path = f"{root}/runs/b/.fp.lock"
    stale = keys.create(path, b"one")
    current = keys.replace(path, b"two", stale)
    assert current != stale and keys.read(path).etag == current
    with pytest.raises(PreconditionFailed):
        keys.replace(path, b"three", stale)
    with pytest.raises(PreconditionFailed):
        keys.delete(path, stale)
    assert keys.read(path).data == b"two"  # neither the stale write nor the stale delete landed
    keys.delete(path, current)
    assert keys.read(path) is None
    keys.delete(path, current)  # gone already counts as deleted
    with pytest.raises(PreconditionFailed):  # a replace never creates
        keys.replace(path, b"four", current)
    assert objects(f"{bucket}/runs/b") == {}


# -- the stage lease ----------------------------------------------------------------------
def lease(fs, key, messages: list | None = None, **kwargs) -> ObjectLease:
    echo = messages.append if messages is not None else (lambda *_: None)
    return ObjectLease(fs, key, what="stage 'pretrain' (fp)", echo=echo, **kwargs)


def test_a_silent_lease_is_taken_over_by_one_driver_and_its_old_holder_cannot_delete_it(bucket):
    fs, root = filesystem(bucket)
    noticing, oblivious = (f"{root}/runs/x/pretrain/.fp{i}.lock" for i in (1, 2))
    noticing_messages: list[str] = []
    old = lease(fs, noticing, noticing_messages, heartbeat_seconds=5)
    old.acquire()
    old_oblivious = lease(fs, oblivious, heartbeat_seconds=1000)
    old_oblivious.acquire()
    time.sleep(2.5)  # > stale_seconds=1 by the server's clock
    assert peek_lease(fs, noticing, stale_seconds=1) is None
    assert peek_lease(fs, noticing)["pid"] == os.getpid()

    # Two drivers take over at once: exactly one wins (ifGenerationMatch on the stale generation).
    contenders = [lease(fs, noticing, stale_seconds=1) for _ in range(2)]
    outcomes = race(contenders)
    assert sorted(map(str, outcomes)).count("won") == 1, outcomes
    winner = contenders[outcomes.index("won")]

    # The old holder's next heartbeat fails: it must not commit, and leaves the lease be.
    assert old.lost.wait(timeout=10), "the old holder's heartbeat did not notice the take-over"
    assert any("lost the lease" in m for m in noticing_messages), noticing_messages
    with pytest.raises(StageLocked, match="was taken over by another driver"):
        old.check_held()
    old.release()
    assert ObjectKeys(fs).read(noticing).etag == winner._etag

    # A holder that has not noticed yet: its release's delete is fenced by its old generation.
    taker = lease(fs, oblivious, stale_seconds=1)
    taker.acquire()
    old_oblivious.release()
    assert ObjectKeys(fs).read(oblivious).etag == taker._etag
    for holder in (winner, taker):
        holder.release()
    assert ObjectKeys(fs).read(noticing) is None and ObjectKeys(fs).read(oblivious) is None


# -- Ray Train's storage ------------------------------------------------------------------
def test_ray_trains_pyarrow_file_system_reaches_the_emulator(bucket):
    import pickle

    from stages.training.launch import ray_storage

    path, pyarrow_fs = ray_storage(f"{bucket}/runs/r/ray")
    assert path == f"{bucket[len('gs://'):]}/runs/r/ray"
    pyarrow_fs = pickle.loads(pickle.dumps(pyarrow_fs))  # as Ray Train sends it to its workers
    with pyarrow_fs.open_output_stream(f"{path}/checkpoint/state.pt") as stream:
        stream.write(b"weights")
    assert objects(f"{bucket}/runs/r") == {"runs/r/ray/checkpoint/state.pt": b"weights"}
