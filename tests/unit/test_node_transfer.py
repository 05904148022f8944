"""A task on another node, without a cluster: the task's side of storage.node_transfer runs in
this process with another PRETRAIN_MIRROR (what a second node's workers have), against a
real S3 server on loopback (moto's, over HTTP; nothing mocked). Its item names the
driver's files; it must read the right bytes from the bucket, write in a private folder,
and its outputs must come back to the driver, whose commit neither uploads them again
nor leaves the stage's deleted scratch files in the bucket."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from stages.tracking import MetricsLog
from storage.artifact_store import open_store
from storage.local_store import inventory
from storage.mirror import mirror_dir
from storage.node_transfer.driver import NodeTransfer
from storage.node_transfer.task_call import TaskResult
from tests.support.s3_server import make_bucket

TOKENIZER = "tokenizer/fp0/tokenizer.json"


@dataclass(frozen=True)
class PackJob:
    tokenizer: Path
    plan: str
    output_dir: Path
    metrics_log: MetricsLog
    shard: int


def pack(job: PackJob) -> dict:
    """A stand-in for a stage's task: reads an input and a driver-written file, writes a
    shard into a folder the driver made, appends a line to the stage's log."""
    shard = job.output_dir / "train" / f"shard-{job.shard}.bin"
    shard.write_bytes(job.tokenizer.read_bytes() + Path(job.plan).read_bytes())
    job.metrics_log.log({"shard": job.shard})
    return {"shard": shard, "tokenizer_seen": str(job.tokenizer)}


@pytest.fixture
def run(s3_endpoint, tmp_path, monkeypatch):
    """(staging, the driver's mirror, the node's mirror root) for a dataset stage with a
    committed tokenizer input."""
    monkeypatch.setenv("PRETRAIN_MIRROR", str(tmp_path / "driver"))
    url = f"{make_bucket('staging')}/runs/x"
    store = open_store(url)
    driver_root = store.workdir
    tokenizer = driver_root / TOKENIZER
    tokenizer.parent.mkdir(parents=True)
    tokenizer.write_bytes(b"tokenizer-v2")
    store.fs.put_file(str(tokenizer), f"{store.root}/{TOKENIZER}")  # committed, as fetch leaves it
    stage_dir = store.prepare("dataset", "fp1", keep_partial=False)
    (stage_dir / "train").mkdir()
    (stage_dir / "plan.json").write_text('{"shards": 2}')
    MetricsLog(stage_dir / "metrics.jsonl").log({"stage": "dataset", "started": True})
    from storage.digest import sha256_file

    staging = NodeTransfer(url, driver_root, stage_dir, {TOKENIZER: sha256_file(tokenizer)},
                          _driver_node="driver-node")
    return staging, store, tmp_path / "node"


def job(staging: NodeTransfer, shard: int) -> PackJob:
    root = staging.driver_root
    return PackJob(root / TOKENIZER, str(staging.stage_dir / "plan.json"), staging.stage_dir,
                   MetricsLog(staging.stage_dir / "metrics.jsonl"), shard)


def on_node(monkeypatch, node_mirror: Path, call, item):
    monkeypatch.setenv("PRETRAIN_MIRROR", str(node_mirror))
    try:
        value, uploaded = call.run_elsewhere(item)
    finally:
        monkeypatch.undo()
    return TaskResult(value, uploaded)


def test_a_task_elsewhere_reads_through_the_bucket_and_its_files_come_back(run, monkeypatch):
    staging, store, node_mirror = run
    items = [job(staging, 0), job(staging, 1)]
    call = staging.dispatch(pack, items)
    # What the driver holds is not there for a task on another node.
    hidden = {path: path.read_bytes() for path in (staging.driver_root / TOKENIZER, staging.stage_dir / "plan.json")}
    for path in hidden:
        path.unlink()
    results = [on_node(monkeypatch, node_mirror, call, item) for item in items]
    for path, data in hidden.items():
        path.write_bytes(data)
    values = [staging.collect(result) for result in results]

    node_root = node_mirror / mirror_dir(staging.url).name
    assert values[0]["tokenizer_seen"] == str(staging.driver_root / TOKENIZER)  # moved back
    assert values[1]["shard"] == staging.stage_dir / "train/shard-1.bin"
    for shard in (0, 1):
        assert (staging.stage_dir / f"train/shard-{shard}.bin").read_bytes() == b'tokenizer-v2{"shards": 2}'
    # Both tasks appended to the log they were given: the driver's copy has both lines.
    records = MetricsLog(staging.stage_dir / "metrics.jsonl").read()
    assert [r.get("shard") for r in records] == [None, 0, 1]
    # The tasks' private folders are gone; the node keeps what it fetched and wrote.
    assert not list(node_root.glob(".node-transfer/tasks/*"))
    assert (node_root / "dataset/fp1/train/shard-0.bin").is_file()
    work = [json.loads(line) for line in (node_root / ".node-transfer/work.jsonl").read_text().splitlines()]
    assert [(w["stage"], w["uploaded"]) for w in work] == [("dataset/fp1", 2), ("dataset/fp1", 2)]
    # The second task used the node's copies (the log too: a task's appended lines are not
    # kept in the node's copy, which stays the one both tasks were dispatched with).
    assert work[0]["fetched"] == 3 and work[1]["fetched"] == 0


def test_a_node_never_takes_its_old_copy_of_the_same_size_for_the_new_bytes(run, monkeypatch):
    staging, store, node_mirror = run
    node_root = node_mirror / mirror_dir(staging.url).name
    item = job(staging, 0)
    call = staging.dispatch(pack, [item])
    on_node(monkeypatch, node_mirror, call, item)
    # A forced re-run of the tokenizer: new bytes, the same size, committed again.
    new_tokenizer = staging.driver_root / TOKENIZER
    new_tokenizer.write_bytes(b"tokenizer-v3")
    store.fs.put_file(str(new_tokenizer), f"{store.root}/{TOKENIZER}")
    from storage.digest import sha256_file

    staging.known[TOKENIZER] = sha256_file(new_tokenizer)
    result = on_node(monkeypatch, node_mirror, staging.dispatch(pack, [item]), item)
    assert (node_root / TOKENIZER).read_bytes() == b"tokenizer-v3"
    shard = next(u for u in result.uploaded if u[0].endswith("shard-0.bin"))
    assert store.fs.cat_file(f"{store.root}/{shard[0]}").startswith(b"tokenizer-v3")


def test_the_commit_skips_what_tasks_uploaded_and_drops_their_deleted_scratch_files(run, monkeypatch):
    staging, store, node_mirror = run
    item = job(staging, 0)
    result = on_node(monkeypatch, node_mirror, staging.dispatch(pack, [item]), item)
    staging.collect(result)
    key = f"{store.root}/dataset/fp1/train/shard-0.bin"
    # Same size, other bytes, behind the driver's back: a commit that uploaded the shard
    # again would overwrite them.
    marker = bytes(len(store.fs.cat_file(key)))
    store.fs.pipe_file(key, marker)
    (staging.stage_dir / "plan.json").unlink()  # scratch: pushed at dispatch, gone before the commit
    manifest = {"stage": "dataset", "fingerprint": "fp1", "files": inventory(staging.stage_dir)}
    store.write_manifest("dataset", "fp1", manifest, in_bucket=staging.in_bucket())
    assert store.fs.cat_file(key) == marker
    assert not store.fs.exists(f"{store.root}/dataset/fp1/plan.json")
    assert store.fs.exists(f"{store.root}/dataset/fp1/metrics.jsonl")  # changed since: uploaded


def test_bytes_that_changed_in_the_bucket_after_dispatch_are_refused_by_name(run, monkeypatch, tmp_path):
    staging, store, _ = run
    item = job(staging, 0)
    call = staging.dispatch(pack, [item])
    store.fs.pipe_file(f"{store.root}/{TOKENIZER}", b"tokenizer-v9")  # another writer, meanwhile
    with pytest.raises(RuntimeError, match=rf"{TOKENIZER} changed in the bucket after the driver listed it"):
        on_node(monkeypatch, tmp_path / "fresh-node", call, item)
    assert not (tmp_path / "fresh-node" / mirror_dir(staging.url).name / TOKENIZER).exists()


def test_a_task_copies_the_stage_file_it_was_dispatched_with_even_if_the_nodes_copy_moved_on(run, tmp_path):
    """Another task of the node may replace the node's copy between the check and the
    copy into this task's private folder: the copy is checked, and fetched again."""
    from storage.node_transfer import transfer

    staging, store, _ = run
    plan = staging.stage_dir / "plan.json"
    rel = f"{staging.stage_rel}/plan.json"
    staging._push(store.fs, store.root, {plan})
    digest = staging.synced[rel][2]
    node_root, private_root = tmp_path / "node-copy", tmp_path / "private"
    (node_root / rel).parent.mkdir(parents=True)
    (node_root / rel).write_text('{"shards": 3}')  # what another task left there
    transfer.copy_checked(store.fs, store.root, node_root, private_root, rel, digest)
    assert (private_root / rel).read_text() == '{"shards": 2}'
    assert (node_root / rel).read_text() == '{"shards": 3}'  # the node's copy is left to its owner


def test_a_training_worker_elsewhere_lists_its_uploads_in_the_bucket_for_the_driver(run, monkeypatch):
    """Ray Train workers return nothing to the driver: what one on another node wrote
    comes back through the list it leaves in the bucket (rank 0's exports, its log)."""
    import storage.node_transfer.task_call as staged_call

    staging, store, node_mirror = run
    loop_config = {"job": job(staging, 7)}
    loop = staged_call.loop_for(staging.dispatch(lambda config: pack(config["job"]), [loop_config]))
    monkeypatch.setattr(staged_call, "current_node", lambda: "worker-node")
    monkeypatch.setenv("PRETRAIN_MIRROR", str(node_mirror))
    loop(loop_config)
    monkeypatch.undo()
    assert not (staging.stage_dir / "train/shard-7.bin").exists()  # not on the driver yet
    staging.collect_worker_uploads()
    assert (staging.stage_dir / "train/shard-7.bin").read_bytes() == b'tokenizer-v2{"shards": 2}'
    assert [r.get("shard") for r in MetricsLog(staging.stage_dir / "metrics.jsonl").read()] == [None, 7]
    assert not store.fs.find(f"{store.root}/dataset/fp1/.uploads")  # the lists and tails are read and gone
