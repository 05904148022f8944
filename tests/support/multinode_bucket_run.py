"""A whole object-store run spread over a Ray cluster of three nodes that do not share
the run's files, whose driver never holds a stage's bulk output; exit non-zero on failure.
Run by tests/integration/test_bucket_run_multinode.py in its own process, because a Ray
cluster cannot share the test session's Ray instance.

    python tests/support/multinode_bucket_run.py WORKDIR

A real S3 server on loopback (moto's, tests/support/s3_server.py) holds the workdir. A
`ray.cluster_utils.Cluster` has a head with no CPUs, where the `pretrain` CLI (the driver)
runs, as on a real cluster whose head only coordinates, and nodes B and C with one CPU
each, whose raylets (and so every worker they start) have their own PRETRAIN_MIRROR. The
data stages' tasks and the two workers of pretrain, finetune and evaluate (one per node)
fetch their inputs from the bucket and upload what they write.

Checked: every stage of the gpt-tiny pipeline commits, report included; B and C both did
work, every stage but the report ran on them, and pretrain and finetune each had a worker
on both (their work logs, storage.node_transfer.transfer.log_work), so their gloo groups spanned
two nodes; the driver's mirror never held a document shard, a
dataset shard, weights or a checkpoint, and never more than DRIVER_QUOTA bytes (a
watcher lists it every 50 ms while the run goes on); ingest, tokenizer, dataset and
pretrain's weights hold the same bytes (sha256) as the same stages on local disk (but for
the times in metrics.jsonl); every object the manifests list is intact in the bucket (a
deep verify), and nothing else is left under the stages' prefixes (the ingest tasks'
scratch files are gone).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT))

CONFIG = "configs/gpt-tiny.yaml"
DATA_STAGES = ("ingest", "tokenizer", "dataset")
# Two workers each for pretrain, finetune and evaluate: one on each node.
BUCKET_STAGES = (*DATA_STAGES, "pretrain", "finetune", "evaluate", "report")
WORKER_STAGES = BUCKET_STAGES[:-1]  # the report runs in the driver
# What the driver's mirror may hold at most: manifests, logs, configs, tokenizer files
# and the report. One stage's shards or weights are several times this.
DRIVER_QUOTA = 1_500_000
# A stage output the driver must never hold (its bulk files, and checkpoint files).
NEVER_ON_DRIVER = (".parquet", ".arrow", ".safetensors", ".npz", ".pt", ".bin")


def cli(*args: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "PYTHONUNBUFFERED": "1"}
    result = subprocess.run([sys.executable, "-m", "cluster.cli", *args], cwd=REPO_ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600)
    print(result.stdout[-6000:], flush=True)
    if result.returncode != 0:
        raise SystemExit(f"pretrain {' '.join(args)} exited {result.returncode}")


def manifest_files(manifest: dict, *, skip: tuple[str, ...] = ()) -> dict[str, tuple[int, str]]:
    return {f["path"]: (f["bytes"], f["sha256"]) for f in manifest["files"] if f["path"] not in skip}


def staged_on_node(mirror: Path) -> dict[str, int]:
    """Per stage, how many tasks or workers ran on the node (its own work log)."""
    from storage.node_transfer.transfer import RECORDS

    counts: dict[str, int] = {}
    for log in (mirror.glob(f"*/{RECORDS}/work.jsonl") if mirror.is_dir() else []):
        for line in log.read_text().splitlines():
            stage = json.loads(line)["stage"].split("/", 1)[0]
            counts[stage] = counts.get(stage, 0) + 1
    return counts


class MirrorWatcher(threading.Thread):
    """Lists a folder every 50 ms: the largest total size seen, and every file name."""

    def __init__(self, root: Path):
        super().__init__(daemon=True)
        self.root, self.peak, self.seen = root, 0, set()
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(0.05):
            total = 0
            for current, _, names in os.walk(self.root):
                for name in names:
                    path = Path(current) / name
                    try:
                        total += path.stat().st_size
                    except OSError:
                        continue  # renamed or removed meanwhile
                    self.seen.add(path.relative_to(self.root).as_posix())
            self.peak = max(self.peak, total)


def main(workdir: Path) -> None:
    from ray.cluster_utils import Cluster

    from storage.artifact_store import open_store
    from pipeline.runner import load_run_index
    from storage.local_store import LocalArtifactStore
    from tests.support.s3_server import make_bucket, s3_server

    driver_mirror = workdir / "driver-mirror"
    node_mirrors = {"B": workdir / "node-b-mirror", "C": workdir / "node-c-mirror"}
    os.environ["PRETRAIN_MIRROR"] = str(driver_mirror)
    driver_mirror.mkdir(parents=True)
    watcher = MirrorWatcher(driver_mirror)
    with s3_server():  # before the cluster: its raylets and workers inherit the endpoint
        url = f"{make_bucket('multinode')}/gpt-tiny"
        cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
        try:
            for mirror in node_mirrors.values():
                cluster.add_node(num_cpus=1, env_vars={"PRETRAIN_MIRROR": str(mirror)})
            cluster.wait_for_nodes()
            common = ("-o", f"ray.address={cluster.address}", "-o", "pretrain.max_steps=4",
                      "-o", "pretrain.checkpoint_every=2", "-o", "pretrain.eval_every=4")
            small = ("-o", "finetune.max_train_examples=64", "-o", "evaluate.tasks=[copa]",
                     "-o", "evaluate.max_examples=4")
            watcher.start()
            try:
                cli("run", CONFIG, "-o", f"workdir={url}", *common, *small)
            finally:
                watcher.stopped.set()
                watcher.join()
        finally:
            cluster.shutdown()
        local = workdir / "local"
        cli("run", CONFIG, "-o", f"workdir={local}", *common[2:],
            *(f"--only={stage}" for stage in (*DATA_STAGES, "pretrain")))

        index = load_run_index(url)
        bucket = open_store(url)
        reference = LocalArtifactStore(local)
        for stage in BUCKET_STAGES:
            fingerprint = index["stages"][stage]
            manifest = bucket.manifest(stage, fingerprint)
            assert manifest is not None, f"{stage} is not committed in {url}"
            damage = bucket.damaged(stage, fingerprint, deep=True, manifest=manifest)
            assert not damage, f"{stage} in the bucket: {damage}"
            objects = {path for path in bucket._remote_sizes(stage, fingerprint)
                       if path and not path.startswith("ray/")}  # Ray Train's checkpoints; a folder marker
            listed = set(manifest_files(manifest)) | {"manifest.json"}
            assert objects == listed, f"{stage}: objects outside its manifest: {sorted(objects - listed)[:5]}, " \
                                      f"missing: {sorted(listed - objects)[:5]}"
            if stage in DATA_STAGES:
                timed = ("metrics.jsonl",)  # wall-clock times in it
                expected = manifest_files(reference.manifest(stage, fingerprint), skip=timed)
                assert manifest_files(manifest, skip=timed) == expected, \
                    f"{stage}: the bucket's files differ from the local run's"
        weights = "model/model.safetensors"
        pretrain = index["stages"]["pretrain"]
        assert manifest_files(bucket.manifest("pretrain", pretrain))[weights] == \
            manifest_files(reference.manifest("pretrain", pretrain))[weights], \
            "pretrain: the bucket run's weights differ from the local run's"

    on_driver = sorted(name for name in watcher.seen if name.endswith(NEVER_ON_DRIVER))
    print(f"driver's mirror: at most {watcher.peak:,} bytes, {len(watcher.seen)} files seen", flush=True)
    assert not on_driver, f"the driver's mirror held stage outputs it must not: {on_driver[:8]}"
    assert watcher.peak <= DRIVER_QUOTA, f"the driver's mirror reached {watcher.peak:,} bytes"
    work = {node: staged_on_node(mirror) for node, mirror in node_mirrors.items()}
    print(f"tasks or workers per stage, per node: {work}", flush=True)
    for stage in WORKER_STAGES:
        assert sum(counts.get(stage, 0) for counts in work.values()) > 0, f"no {stage} work on B or C: {work}"
    for node, counts in work.items():
        assert counts, f"node {node} ran nothing: {work}"
        # Two Ray Train workers of one CPU each on nodes of one CPU: one per node, so
        # DeepSpeed's gloo group spans both (what tests/multinode_pretrain.py checked).
        for stage in ("pretrain", "finetune"):
            assert counts.get(stage, 0) > 0, f"no {stage} worker on node {node}: {work}"
    print("MULTINODE BUCKET OK", flush=True)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
