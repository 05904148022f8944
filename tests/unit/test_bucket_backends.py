"""What a bucket back end must give the artifact store and the stage lease, once for each
real server on loopback: S3 (moto's server, tests/support/s3_server.py) and GCS (fake-gcs-server,
tests/support/gcs_server.py), over HTTP through s3fs / gcsfs, nothing mocked. A stage's files go
up at its commit and come back byte for byte; the manifest is committed once; a changed
object is found by size and by sha256; one lease holder at a time. What only one back end
has (S3's verify command, GCS's generations) stays in test_object_store.py,
test_object_lease.py and test_gcs_store.py."""

from __future__ import annotations

import itertools
import json
import os
import shutil
import socket
from dataclasses import dataclass
from typing import Callable

import pytest

from storage.artifact_store import open_store
from storage.local_store import StageCommitConflict
from storage.object_keys import ObjectKeys, PreconditionFailed, filesystem
from storage.object_lease import ObjectLease, peek_lease
from storage.object_store import ObjectArtifactStore
from storage.writer_lock import StageLocked
from tests.support.stage_files import FILES, finished_stage

_names = itertools.count()


@dataclass
class Backend:
    bucket: str                                  # s3://... or gs://...
    objects: Callable[[str], dict[str, bytes]]   # every object under a URL, from the server itself
    put_object: Callable[[str, bytes], None]     # overwrite an object behind the store's back


@pytest.fixture(params=["s3", "gcs"])
def backend(request, tmp_path, monkeypatch) -> Backend:
    monkeypatch.setenv("PRETRAIN_MIRROR", str(tmp_path / "mirror"))
    if request.param == "s3":
        from tests.unit import test_object_store as s3

        request.getfixturevalue("s3_endpoint")
        from tests.support.s3_server import make_bucket

        return Backend(make_bucket("backend-test"), s3.objects, s3.put_object)
    from tests.unit import test_gcs_store as gcs

    request.getfixturevalue("gcs_endpoint")
    from tests.support.gcs_server import make_gcs_bucket

    return Backend(make_gcs_bucket(f"backend-test-{next(_names)}"), gcs.objects, gcs.put_object)


# -- the artifact store -------------------------------------------------------------------

def test_files_go_up_at_the_commit_and_come_back_byte_for_byte(backend, tmp_path):
    url = f"{backend.bucket}/runs/a"
    store = open_store(url)
    assert isinstance(store, ObjectArtifactStore) and store.url == url
    assert store.workdir.is_relative_to(tmp_path / "mirror")  # PRETRAIN_MIRROR
    directory = store.prepare("dataset", "fp0001", keep_partial=False)
    assert directory == store.stage_dir("dataset", "fp0001") and directory.is_dir()
    (directory / "shard-0.bin").write_bytes(FILES["shard-0.bin"])
    assert not store.is_finished("dataset", "fp0001")
    assert backend.objects(url) == {}  # nothing is uploaded before the commit

    manifest = finished_stage(store)
    assert store.is_finished("dataset", "fp0001")
    assert store.manifest("dataset", "fp0001") == manifest
    assert store.damaged("dataset", "fp0001", deep=True) == []
    in_bucket = backend.objects(url)
    prefix = "runs/a/dataset/fp0001/"
    assert set(in_bucket) == {prefix + name for name in (*FILES, "manifest.json")}
    assert all(in_bucket[prefix + name] == data for name, data in FILES.items())
    assert json.loads(in_bucket[prefix + "manifest.json"]) == manifest

    # Another machine: nothing local. fetch restores every file; a small-files-only
    # fetch (what reports read) leaves out the big ones.
    shutil.rmtree(store.workdir)
    other = ObjectArtifactStore(url, mirror=tmp_path / "other-machine")
    small = other.fetch("dataset", "fp0001", max_file_bytes=100)
    assert (small / "nested/part/metrics.jsonl").read_bytes() == FILES["nested/part/metrics.jsonl"]
    assert not (small / "shard-0.bin").exists()
    fetched = store.fetch("dataset", "fp0001")
    assert fetched == directory
    for name, data in FILES.items():
        assert (fetched / name).read_bytes() == data, name
    assert json.loads((fetched / "manifest.json").read_text()) == manifest
    assert not list(fetched.rglob("*.partial"))


def test_a_second_commit_is_refused_and_the_first_manifest_stands(backend):
    url = f"{backend.bucket}/runs/c"
    store = open_store(url)
    first = finished_stage(store)
    with pytest.raises(StageCommitConflict, match="manifest.json already exists: another driver"):
        store.write_manifest("dataset", "fp0001", {**first, "metrics": {"n": 2}})
    assert store.manifest("dataset", "fp0001") == first
    assert json.loads(backend.objects(url)["runs/c/dataset/fp0001/manifest.json"]) == first
    # The losing driver's mirror does not claim its own version either.
    assert json.loads((store.stage_dir("dataset", "fp0001") / "manifest.json").read_text()) == first

    # The precondition itself, without the existence check write_manifest makes first:
    # two drivers past that check at once still commit one manifest.
    with pytest.raises(PreconditionFailed):
        store.keys.create(store._key("dataset", "fp0001", "manifest.json"), b"{}")
    assert store.manifest("dataset", "fp0001") == first


def test_a_changed_object_is_found_by_size_and_by_sha256(backend):
    url = f"{backend.bucket}/runs/v"
    store = open_store(url)
    finished_stage(store)
    shard = bytearray(FILES["shard-0.bin"])
    shard[100] ^= 0xFF
    backend.put_object(f"{url}/dataset/fp0001/shard-0.bin", bytes(shard))  # same size, other bytes
    assert store.damaged("dataset", "fp0001") == []
    (damage,) = store.damaged("dataset", "fp0001", deep=True)
    assert damage.path == "shard-0.bin" and "other bytes" in damage.problem

    # Another size, and gone: the listing tells (no download).
    backend.put_object(f"{url}/dataset/fp0001/shard-0.bin", b"short")
    (damage,) = store.damaged("dataset", "fp0001")
    assert damage.problem == f"is 5 bytes, the manifest says {len(FILES['shard-0.bin'])}"
    fs, root = filesystem(url)
    fs.rm(f"{root}/dataset/fp0001/nested/part/metrics.jsonl")
    assert [(d.path, d.problem) for d in store.damaged("dataset", "fp0001")][0] == \
        ("nested/part/metrics.jsonl", "is missing from the bucket")


# -- the stage lease ----------------------------------------------------------------------

def test_a_second_driver_is_refused_naming_the_holder_and_gets_it_after_release(backend):
    fs, root = filesystem(backend.bucket)
    key = f"{root}/runs/x/pretrain/.fp0001.lock"

    def lease() -> ObjectLease:
        return ObjectLease(fs, key, what="stage 'pretrain' (fp)", echo=lambda *_: None)

    first = lease()
    first.acquire()
    holder = peek_lease(fs, key)
    assert holder["pid"] == os.getpid() and holder["host"] == socket.gethostname()
    with pytest.raises(StageLocked, match=rf"being written by pid {os.getpid()} on host "
                                          rf"{socket.gethostname()}.*--wait-lock"):
        lease().acquire()
    first.release()
    assert ObjectKeys(fs).read(key) is None and peek_lease(fs, key) is None
    with lease() as second:
        second.check_held()
        assert peek_lease(fs, key) is not None
    assert peek_lease(fs, key) is None
