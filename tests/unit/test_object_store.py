"""The artifact store on a real S3 server on loopback (moto's server, talked to over HTTP
by s3fs and boto3, nothing mocked): a changed object is found by `pretrain verify`; a
failed or reset stage is never taken as finished. What S3 and GCS share (the commit, the
fetch, the damage checks) is test_bucket_backends.py, run against both."""

from __future__ import annotations

import json

import pytest

from storage.artifact_store import open_store
from storage.local_store import RUN_INDEX, inventory
from storage.object_store import ObjectArtifactStore
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




def test_a_changed_object_is_found_by_size_and_by_sha256_and_by_verify(bucket, capsys):
    from cluster.cli import main
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
