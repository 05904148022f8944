"""The artifact store on a real S3 server on loopback (moto's server, talked to over HTTP
by s3fs and boto3, nothing mocked): a stage's files go up at its commit and come back
byte for byte on a machine without them; a changed object is found; the manifest is
committed once; a failed or reset stage is never taken as finished."""

from __future__ import annotations

import json
import shutil

import pytest

from pipeline.object_store import filesystem
from pipeline.remote_store import ObjectArtifactStore, open_store
from pipeline.store import RUN_INDEX, StageCommitConflict, inventory
from tests.support.s3_server import make_bucket
from tests.support.stage_files import FILES, finished_stage



@pytest.fixture
def bucket(s3_endpoint, tmp_path, monkeypatch) -> str:
    monkeypatch.setenv("PRETRAIN_MIRROR", str(tmp_path / "mirror"))
    return make_bucket("store-test")


def objects(url: str) -> dict[str, bytes]:
    """Every object under `url`, read straight from the server (no listing cache)."""
    import boto3

    bucket, _, prefix = url[len("s3://"):].partition("/")
    client = boto3.client("s3")
    listing = client.list_objects_v2(Bucket=bucket, Prefix=prefix).get("Contents", [])
    return {item["Key"]: client.get_object(Bucket=bucket, Key=item["Key"])["Body"].read() for item in listing}


def put_object(url: str, data: bytes) -> None:
    import boto3

    bucket, _, key = url[len("s3://"):].partition("/")
    boto3.client("s3").put_object(Bucket=bucket, Key=key, Body=data)


def test_files_go_up_at_the_commit_and_come_back_byte_for_byte(bucket, tmp_path):
    store = open_store(f"{bucket}/runs/a")
    assert isinstance(store, ObjectArtifactStore) and store.url == f"{bucket}/runs/a"
    assert store.workdir.is_relative_to(tmp_path / "mirror")  # PRETRAIN_MIRROR
    directory = store.prepare("dataset", "fp0001", keep_partial=False)
    assert directory == store.stage_dir("dataset", "fp0001") and directory.is_dir()
    (directory / "shard-0.bin").write_bytes(FILES["shard-0.bin"])
    assert not store.is_finished("dataset", "fp0001")
    assert objects(f"{bucket}/runs/a") == {}  # nothing is uploaded before the commit

    manifest = finished_stage(store)
    assert store.is_finished("dataset", "fp0001")
    assert store.manifest("dataset", "fp0001") == manifest
    assert store.damaged("dataset", "fp0001", deep=True) == []
    in_bucket = objects(f"{bucket}/runs/a")
    prefix = "runs/a/dataset/fp0001/"
    assert set(in_bucket) == {prefix + name for name in (*FILES, "manifest.json")}
    assert all(in_bucket[prefix + name] == data for name, data in FILES.items())
    assert json.loads(in_bucket[prefix + "manifest.json"]) == manifest

    # Another machine: nothing local. fetch restores every file; a small-files-only
    # fetch (what reports read) leaves out the big ones.
    shutil.rmtree(store.workdir)
    other = ObjectArtifactStore(f"{bucket}/runs/a", mirror=tmp_path / "other-machine")
    small = other.fetch("dataset", "fp0001", max_file_bytes=100)
    assert (small / "nested/part/metrics.jsonl").read_bytes() == FILES["nested/part/metrics.jsonl"]
    assert not (small / "shard-0.bin").exists()
    fetched = store.fetch("dataset", "fp0001")
    assert fetched == directory
    for name, data in FILES.items():
        assert (fetched / name).read_bytes() == data, name
    assert json.loads((fetched / "manifest.json").read_text()) == manifest
    assert not list(fetched.rglob("*.partial"))


def test_a_changed_object_is_found_by_size_and_by_sha256_and_by_verify(bucket, capsys):
    from pipeline.cli import main
    from pipeline.verify import verify_run

    url = f"{bucket}/runs/v"
    store = open_store(url)
    finished_stage(store)
    store.put_small(RUN_INDEX, json.dumps({"name": "v", "stages": {"dataset": "fp0001"}}).encode())
    lines: list[str] = []
    assert verify_run(url, echo=lines.append) == 0, lines

    # Same size, other bytes: only the sha256 tells.
    shard = bytearray(FILES["shard-0.bin"])
    shard[100] ^= 0xFF
    put_object(f"{url}/dataset/fp0001/shard-0.bin", bytes(shard))
    assert store.damaged("dataset", "fp0001") == []
    (damage,) = store.damaged("dataset", "fp0001", deep=True)
    assert damage.path == "shard-0.bin" and "other bytes" in damage.problem
    lines.clear()
    assert verify_run(url, echo=lines.append) == 1
    assert any(f"{url}/dataset/fp0001/shard-0.bin has other bytes" in line for line in lines), lines
    assert main(["verify", url]) == 1
    assert "DAMAGED (1 files)" in capsys.readouterr().out

    # Another size, and gone: the listing tells (no download).
    put_object(f"{url}/dataset/fp0001/shard-0.bin", b"short")
    (damage,) = store.damaged("dataset", "fp0001")
    assert damage.problem == f"is 5 bytes, the manifest says {len(FILES['shard-0.bin'])}"
    fs, root = filesystem(url)
    fs.rm(f"{root}/dataset/fp0001/nested/part/metrics.jsonl")
    assert [(d.path, d.problem) for d in store.damaged("dataset", "fp0001")][0] == \
        ("nested/part/metrics.jsonl", "is missing from the bucket")


def test_a_second_commit_is_refused_and_the_first_manifest_stands(bucket):
    store = open_store(f"{bucket}/runs/c")
    first = finished_stage(store)
    second = {**first, "metrics": {"n": 2}}
    with pytest.raises(StageCommitConflict, match="manifest.json already exists: another driver"):
        store.write_manifest("dataset", "fp0001", second)
    assert store.manifest("dataset", "fp0001") == first
    assert json.loads(objects(f"{bucket}/runs/c")["runs/c/dataset/fp0001/manifest.json"]) == first
    # The losing driver's mirror does not claim its own version either.
    assert json.loads((store.stage_dir("dataset", "fp0001") / "manifest.json").read_text()) == first


def test_prepare_resets_the_prefix_and_keep_partial_keeps_all_but_the_manifest(bucket):
    url = f"{bucket}/runs/p"
    store = open_store(url)
    finished_stage(store, "pretrain")
    put_object(f"{url}/pretrain/fp0001/ray/pretrain/checkpoint_000001/state.pt", b"weights")
    store.write_failure("pretrain", "fp0001", {"error": "old"})

    kept = store.prepare("pretrain", "fp0001", keep_partial=True)
    assert not store.is_finished("pretrain", "fp0001") and store.failure("pretrain", "fp0001") is None
    remaining = set(objects(url))
    assert "runs/p/pretrain/fp0001/ray/pretrain/checkpoint_000001/state.pt" in remaining
    assert "runs/p/pretrain/fp0001/manifest.json" not in remaining
    assert (kept / "shard-0.bin").is_file() and not (kept / "manifest.json").exists()
    assert store.started("pretrain", "fp0001")

    fresh = store.prepare("pretrain", "fp0001", keep_partial=False)
    assert objects(url) == {}
    assert fresh.is_dir() and not any(fresh.iterdir())


def test_a_failed_stage_is_never_finished_and_its_failure_is_readable_anywhere(bucket, tmp_path):
    url = f"{bucket}/runs/f"
    store = open_store(url)
    directory = store.prepare("tokenizer", "fp0002", keep_partial=False)
    (directory / "vocab.json").write_text("{}")  # written before the stage raised
    store.write_failure("tokenizer", "fp0002", {"stage": "tokenizer", "error": "ValueError: bad"})
    elsewhere = ObjectArtifactStore(url, mirror=tmp_path / "other-machine")
    for seen in (store, elsewhere):
        assert not seen.is_finished("tokenizer", "fp0002")
        assert seen.manifest("tokenizer", "fp0002") is None
        assert seen.failure("tokenizer", "fp0002")["error"] == "ValueError: bad"
    assert set(objects(url)) == {"runs/f/tokenizer/fp0002/failure.json"}  # no file of it is published
    assert elsewhere.fetch("tokenizer", "fp0002") == elsewhere.stage_dir("tokenizer", "fp0002")
    assert not (elsewhere.stage_dir("tokenizer", "fp0002") / "vocab.json").exists()

    # The retry succeeds: its commit takes the failure record away.
    store.prepare("tokenizer", "fp0002", keep_partial=False)
    (directory / "vocab.json").write_text("{}")
    store.write_manifest("tokenizer", "fp0002", {"files": inventory(directory)})
    assert elsewhere.failure("tokenizer", "fp0002") is None and elsewhere.is_finished("tokenizer", "fp0002")


def test_a_commit_by_another_machine_is_seen_at_once(bucket):
    """A driver that waited for another's lease asks is_finished after the other committed;
    what it listed before (an interrupted attempt's checkpoints) must not answer for the
    bucket (a stale "no manifest" would make it run the stage again)."""
    url = f"{bucket}/runs/w"
    store = open_store(url)
    put_object(f"{url}/pretrain/fp0001/ray/pretrain/checkpoint_000001/state.pt", b"weights")
    assert store.started("pretrain", "fp0001") and not store.is_finished("pretrain", "fp0001")
    assert store.previous_manifests("pretrain") == []
    put_object(f"{url}/pretrain/fp0001/manifest.json", json.dumps({"files": []}).encode())  # the other driver
    assert store.is_finished("pretrain", "fp0001")
    assert store.manifest("pretrain", "fp0001") == {"files": []}
