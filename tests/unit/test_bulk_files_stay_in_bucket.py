"""An object-store stage's bulk files (StageSpec.bulk_files) never come to the driver:
a task on another node writes a shard, the driver keeps only its size and sha256, a task
on a third node reads it from the bucket, and the commit lists it without uploading it.
Tasks run in this process with another PRETRAIN_MIRROR (what a second node's workers
have), against moto's S3 server on loopback (nothing mocked)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from pipeline.runner import with_remote_files
from storage.artifact_store import open_store
from storage.local_store import inventory
from storage.node_transfer.driver import NodeTransfer
from storage.node_transfer.task_call import TaskResult
from tests.support.s3_server import make_bucket

SHARD_BYTES = b"shard-bytes-" * 100
DOCUMENTS = "ingest/fp0/documents/part-00000.parquet"


@dataclass(frozen=True)
class Write:
    output_dir: Path
    source: Path


@dataclass(frozen=True)
class Read:
    shard: Path


def write_shard(job: Write) -> int:
    (job.output_dir / "train").mkdir(exist_ok=True)
    (job.output_dir / "train" / "shard-0.arrow").write_bytes(SHARD_BYTES + job.source.read_bytes())
    (job.output_dir / "rows.json").write_text('{"rows": 3}')
    return 3


def read_shard(job: Read) -> str:
    return hashlib.sha256(job.shard.read_bytes()).hexdigest()


def on_node(monkeypatch, mirror: Path, call, item) -> TaskResult:
    monkeypatch.setenv("PRETRAIN_MIRROR", str(mirror))
    try:
        return TaskResult(*call.run_elsewhere(item))
    finally:
        monkeypatch.undo()


def dataset_stage(tmp_path: Path, monkeypatch, bucket: str):
    """(store, staging) of a dataset stage whose committed input DOCUMENTS only the
    bucket holds (the driver's fetch left it there)."""
    monkeypatch.setenv("PRETRAIN_MIRROR", str(tmp_path / "driver"))
    url = f"{make_bucket(bucket)}/runs/x"
    store = open_store(url)
    store.fs.pipe_file(f"{store.root}/{DOCUMENTS}", b"documents")
    stage_dir = store.prepare("dataset", "fp1", keep_partial=False)
    staging = NodeTransfer(url, store.workdir, stage_dir,
                          known={DOCUMENTS: hashlib.sha256(b"documents").hexdigest()},
                          known_sizes={DOCUMENTS: 9}, bulk=("train/*",), _driver_node="driver-node")
    return store, staging


def test_a_bulk_file_written_elsewhere_stays_in_the_bucket_and_is_committed_from_its_report(
        s3_endpoint, tmp_path, monkeypatch):
    store, staging = dataset_stage(tmp_path, monkeypatch, "bulk")
    stage_dir = staging.stage_dir
    # The committed input's bulk file is not fetched to the driver (fetch's `leave`).
    store.fs.pipe_file(f"{store.root}/ingest/fp0/manifest.json",
                       b'{"files": [{"path": "documents/part-00000.parquet", "bytes": 9, "sha256": "'
                       + hashlib.sha256(b"documents").hexdigest().encode() + b'"}]}')
    store.fetch("ingest", "fp0", leave=("documents/*",))
    assert not (store.workdir / DOCUMENTS).exists()

    item = Write(stage_dir, store.workdir / DOCUMENTS)
    result = on_node(monkeypatch, tmp_path / "node-b", staging.dispatch(write_shard, [item]), item)
    assert staging.collect(result) == 3
    shard = stage_dir / "train" / "shard-0.arrow"
    written = SHARD_BYTES + b"documents"
    assert not shard.exists()  # the bulk file is not brought here ...
    assert (stage_dir / "rows.json").read_text() == '{"rows": 3}'  # ... the small one is
    assert staging.remote_files() == [{"path": "train/shard-0.arrow", "bytes": len(written),
                                       "sha256": hashlib.sha256(written).hexdigest()}]

    # A task on a third node reads the shard only the bucket holds.
    reader = Read(shard)
    result = on_node(monkeypatch, tmp_path / "node-c", staging.dispatch(read_shard, [reader]), reader)
    assert staging.collect(result) == hashlib.sha256(written).hexdigest()
    assert not shard.exists()

    files, elsewhere = with_remote_files(inventory(stage_dir), staging.remote_files())
    assert [entry["path"] for entry in files] == ["rows.json", "train/shard-0.arrow"]
    key = f"{store.root}/dataset/fp1/train/shard-0.arrow"
    marker = bytes(len(written))  # same size, other bytes: an upload would overwrite them
    store.fs.pipe_file(key, marker)
    store.write_manifest("dataset", "fp1", {"files": files}, in_bucket=staging.in_bucket(),
                         elsewhere=elsewhere, removed=staging.dropped_files())
    assert store.fs.cat_file(key) == marker
    assert store.manifest("dataset", "fp1")["files"] == files
    assert not shard.exists()


def test_a_forgotten_scratch_folder_written_elsewhere_is_removed_from_the_bucket_at_the_commit(
        s3_endpoint, tmp_path, monkeypatch):
    monkeypatch.setenv("PRETRAIN_MIRROR", str(tmp_path / "driver"))
    url = f"{make_bucket('forget')}/runs/x"
    store = open_store(url)
    stage_dir = store.prepare("ingest", "fp1", keep_partial=False)
    (stage_dir / "staging").mkdir()
    staging = NodeTransfer(url, store.workdir, stage_dir, bulk=("staging/*",), _driver_node="driver-node")

    def stage_file(output_dir: Path) -> None:
        (output_dir / "staging" / "file-0.parquet").write_bytes(b"cleaned")

    result = on_node(monkeypatch, tmp_path / "node-b", staging.dispatch(stage_file, [stage_dir]), stage_dir)
    staging.collect(result)
    assert staging.remote_files()[0]["path"] == "staging/file-0.parquet"
    staging.forget(stage_dir / "staging")
    assert staging.remote_files() == []
    files, elsewhere = with_remote_files(inventory(stage_dir), staging.remote_files())
    store.write_manifest("ingest", "fp1", {"files": files}, in_bucket=staging.in_bucket(),
                         elsewhere=elsewhere, removed=staging.dropped_files())
    assert not store.fs.exists(f"{store.root}/ingest/fp1/staging/file-0.parquet")


def test_a_task_on_the_drivers_node_fetches_bulk_inputs_and_never_reads_a_damaged_copy(
        s3_endpoint, tmp_path, monkeypatch):
    """The driver's node is one of the nodes that work: a task there gets the input the
    driver left in the bucket, and a copy in its mirror with other bytes (same size) is
    replaced, not read."""
    import storage.node_transfer.task_call as staged_call

    store, staging = dataset_stage(tmp_path, monkeypatch, "driver-node")
    monkeypatch.setattr(staged_call, "current_node", lambda: "driver-node")
    item = Read(store.workdir / DOCUMENTS)
    call = staging.dispatch(read_shard, [item])
    assert call(item).value == hashlib.sha256(b"documents").hexdigest()  # fetched here first
    (store.workdir / DOCUMENTS).write_bytes(b"DOCUMENTS")  # damaged: same size, new mtime
    assert call(item).value == hashlib.sha256(b"documents").hexdigest()


def test_an_input_whose_size_changed_in_the_bucket_is_refused_before_it_is_hashed(
        s3_endpoint, tmp_path, monkeypatch):
    store, staging = dataset_stage(tmp_path, monkeypatch, "sizes")
    item = Read(store.workdir / DOCUMENTS)
    call = staging.dispatch(read_shard, [item])
    store.fs.pipe_file(f"{store.root}/{DOCUMENTS}", b"documents, rewritten")  # meanwhile
    try:
        on_node(monkeypatch, tmp_path / "node-b", call, item)
    except RuntimeError as error:
        assert "(a file of 20 bytes, not 9)" in str(error), error
    else:
        raise AssertionError("a changed input was read")


def test_a_driver_started_again_takes_back_the_bulk_files_an_earlier_attempt_left_in_the_bucket(
        s3_endpoint, tmp_path, monkeypatch):
    """The reports of bulk files live in the driver's memory and in the stage's journal
    in the bucket: a driver killed mid-stage, run again, does not redo the tasks whose
    outputs are there with their reported size; the commit removes the journal."""
    store, staging = dataset_stage(tmp_path, monkeypatch, "journal")
    item = Write(staging.stage_dir, store.workdir / DOCUMENTS)
    staging.collect(on_node(monkeypatch, tmp_path / "node-b", staging.dispatch(write_shard, [item]), item))
    written = staging.remote_files()
    assert len(written) == 1

    def next_driver() -> NodeTransfer:  # the same stage, nothing in memory
        return NodeTransfer(staging.url, staging.driver_root, staging.stage_dir, bulk=staging.bulk,
                           _driver_node="driver-node")

    again = next_driver()
    assert again.restore_remote() == 1
    assert again.remote_files() == written
    store.fs.rm_file(f"{store.root}/dataset/fp1/train/shard-0.arrow")  # gone: not taken back
    assert next_driver().restore_remote() == 0

    files, elsewhere = with_remote_files(inventory(again.stage_dir), again.remote_files())
    store.fs.pipe_file(f"{store.root}/dataset/fp1/train/shard-0.arrow", SHARD_BYTES + b"documents")
    store.write_manifest("dataset", "fp1", {"files": files}, in_bucket=again.in_bucket(),
                         elsewhere=elsewhere, removed=again.dropped_files())
    assert not store.fs.find(f"{store.root}/dataset/fp1/.remote")
