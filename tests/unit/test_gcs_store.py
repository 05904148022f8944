"""gs:// on a GCS emulator on loopback (fake-gcs-server, over HTTP; gcsfs and pyarrow
unmocked): the generation preconditions ObjectKeys sends are the server's (a create is
exclusive, a stale generation cannot overwrite or delete), the artifact store commits a
stage once and brings its files back byte for byte, and the stage lease keeps one holder,
is taken over when silent, and a holder that lost it leaves the new holder's lease alone.
The test_object_store / test_object_lease cases for S3 are the model; these are the ones
that depend on the store's preconditions and listings."""

from __future__ import annotations

import itertools
import json
import os
import shutil
import time
import urllib.parse
import urllib.request

import pytest

from pipeline.object_lease import ObjectLease, peek_lease
from pipeline.object_store import ObjectKeys, PreconditionFailed, filesystem
from pipeline.remote_store import ObjectArtifactStore, open_store
from pipeline.stage_lock import StageLocked
from pipeline.store import StageCommitConflict
from tests.support.lease_race import race
from tests.support.gcs_server import make_gcs_bucket
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


# -- the artifact store -------------------------------------------------------------------

def test_files_go_up_at_the_commit_and_come_back_byte_for_byte(bucket, tmp_path):
    store = open_store(f"{bucket}/runs/a")
    assert isinstance(store, ObjectArtifactStore) and store.workdir.is_relative_to(tmp_path / "mirror")
    directory = store.prepare("dataset", "fp0001", keep_partial=False)
    (directory / "shard-0.bin").write_bytes(FILES["shard-0.bin"])
    assert not store.is_finished("dataset", "fp0001")
    assert objects(f"{bucket}/runs/a") == {}  # nothing is uploaded before the commit

    manifest = finished_stage(store)
    assert store.is_finished("dataset", "fp0001") and store.manifest("dataset", "fp0001") == manifest
    assert store.damaged("dataset", "fp0001", deep=True) == []
    in_bucket = objects(f"{bucket}/runs/a")
    prefix = "runs/a/dataset/fp0001/"
    assert set(in_bucket) == {prefix + name for name in (*FILES, "manifest.json")}
    assert all(in_bucket[prefix + name] == data for name, data in FILES.items())
    assert json.loads(in_bucket[prefix + "manifest.json"]) == manifest

    shutil.rmtree(store.workdir)  # another machine: nothing local
    fetched = store.fetch("dataset", "fp0001")
    for name, data in FILES.items():
        assert (fetched / name).read_bytes() == data, name
    assert json.loads((fetched / "manifest.json").read_text()) == manifest
    assert not list(fetched.rglob("*.partial"))


def test_a_second_commit_is_refused_and_the_first_manifest_stands(bucket):
    store = open_store(f"{bucket}/runs/c")
    first = finished_stage(store)
    with pytest.raises(StageCommitConflict, match="manifest.json already exists: another driver"):
        store.write_manifest("dataset", "fp0001", {**first, "metrics": {"n": 2}})
    assert store.manifest("dataset", "fp0001") == first
    assert json.loads(objects(f"{bucket}/runs/c")["runs/c/dataset/fp0001/manifest.json"]) == first

    # The precondition itself, without the existence check write_manifest makes first:
    # two drivers past that check at once still commit one manifest.
    key = store._key("dataset", "fp0001", "manifest.json")
    with pytest.raises(PreconditionFailed):
        store.keys.create(key, b"{}")
    assert store.manifest("dataset", "fp0001") == first


def test_a_changed_object_is_found_by_size_and_by_sha256(bucket):
    url = f"{bucket}/runs/v"
    store = open_store(url)
    finished_stage(store)
    shard = bytearray(FILES["shard-0.bin"])
    shard[100] ^= 0xFF
    put_object(f"{url}/dataset/fp0001/shard-0.bin", bytes(shard))  # same size, other bytes
    assert store.damaged("dataset", "fp0001") == []
    (damage,) = store.damaged("dataset", "fp0001", deep=True)
    assert damage.path == "shard-0.bin" and "other bytes" in damage.problem

    put_object(f"{url}/dataset/fp0001/shard-0.bin", b"short")
    (damage,) = store.damaged("dataset", "fp0001")
    assert damage.problem == f"is 5 bytes, the manifest says {len(FILES['shard-0.bin'])}"
    fs, root = filesystem(url)
    fs.rm(f"{root}/dataset/fp0001/nested/part/metrics.jsonl")
    assert [(d.path, d.problem) for d in store.damaged("dataset", "fp0001")][0] == \
        ("nested/part/metrics.jsonl", "is missing from the bucket")


# -- the stage lease ----------------------------------------------------------------------
def lease(fs, key, messages: list | None = None, **kwargs) -> ObjectLease:
    echo = messages.append if messages is not None else (lambda *_: None)
    return ObjectLease(fs, key, what="stage 'pretrain' (fp)", echo=echo, **kwargs)


def test_a_second_driver_is_refused_naming_the_holder_and_gets_it_after_release(bucket):
    fs, root = filesystem(bucket)
    key = f"{root}/runs/x/pretrain/.fp0001.lock"
    first = lease(fs, key)
    first.acquire()
    assert peek_lease(fs, key)["pid"] == os.getpid()
    with pytest.raises(StageLocked, match=rf"being written by pid {os.getpid()} on host .*--wait-lock"):
        lease(fs, key).acquire()
    first.release()
    assert ObjectKeys(fs).read(key) is None and peek_lease(fs, key) is None
    with lease(fs, key) as second:
        second.check_held()
    assert peek_lease(fs, key) is None


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
