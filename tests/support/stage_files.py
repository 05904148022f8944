"""A small finished stage for the object-store tests (S3 and GCS alike): a few files of
different shapes (binary, nested, empty), committed through the store under test."""

from __future__ import annotations

from storage.local_store import inventory

FILES = {"shard-0.bin": bytes(range(256)) * 40, "nested/part/metrics.jsonl": b'{"step": 1}\n',
         "empty.txt": b""}


def finished_stage(store, stage: str = "dataset", fp: str = "fp0001") -> dict:
    """Write FILES into the stage's folder and commit them; returns the manifest."""
    directory = store.prepare(stage, fp, keep_partial=False)
    for name, data in FILES.items():
        (directory / name).parent.mkdir(parents=True, exist_ok=True)
        (directory / name).write_bytes(data)
    manifest = {"stage": stage, "fingerprint": fp, "files": inventory(directory), "metrics": {"n": 1}}
    store.write_manifest(stage, fp, manifest)
    return manifest
