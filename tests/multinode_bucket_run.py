"""An object-store run spread over two Ray nodes that do not share the run's files; exit
non-zero on failure. Run by tests/integration/test_bucket_run_multinode.py in its own
process, because a Ray cluster cannot share the test session's Ray instance.

    python tests/multinode_bucket_run.py WORKDIR

A real S3 server on loopback (moto's, tests/s3_server.py) holds the workdir. A
`ray.cluster_utils.Cluster` has two nodes with one CPU each: the head, where the `pretrain`
CLI (the driver) runs, and node B, whose raylet (and so every worker it starts) has its
own PRETRAIN_MIRROR: what a task there finds under the driver's mirror is nothing. The
data stages' tasks and the two workers of pretrain, finetune and evaluate (one per node:
each node has one CPU) must then fetch their inputs from the bucket and upload what they
write.

Checked: every stage commits; node B did run work of ingest, dataset, pretrain, finetune
and evaluate (its work log, stages.staging.transfer.log_work); ingest, tokenizer and dataset hold the same
files, byte for byte (sha256), as the same stages on local disk (but for the times in metrics.jsonl); every object the
manifests list is intact in the bucket (a deep verify), and nothing else is left under
the stages' prefixes (the ingest tasks' scratch files are gone).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

CONFIG = "configs/gpt-tiny.yaml"
DATA_STAGES = ("ingest", "tokenizer", "dataset")
# Two workers each for pretrain, finetune and evaluate: one on each node.
BUCKET_STAGES = (*DATA_STAGES, "pretrain", "finetune", "evaluate")


def cli(*args: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "PYTHONUNBUFFERED": "1"}
    result = subprocess.run([sys.executable, "-m", "pipeline.cli", *args], cwd=REPO_ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600)
    print(result.stdout[-6000:], flush=True)
    if result.returncode != 0:
        raise SystemExit(f"pretrain {' '.join(args)} exited {result.returncode}")


def manifest_files(manifest: dict, *, skip: tuple[str, ...] = ()) -> dict[str, tuple[int, str]]:
    return {f["path"]: (f["bytes"], f["sha256"]) for f in manifest["files"] if f["path"] not in skip}


def staged_on_node(mirror: Path) -> dict[str, int]:
    """Per stage, how many tasks or workers ran on the node (its own work log)."""
    from stages.staging.transfer import RECORDS

    counts: dict[str, int] = {}
    for log in (mirror.glob(f"*/{RECORDS}/work.jsonl") if mirror.is_dir() else []):
        for line in log.read_text().splitlines():
            stage = json.loads(line)["stage"].split("/", 1)[0]
            counts[stage] = counts.get(stage, 0) + 1
    return counts


def main(workdir: Path) -> None:
    from ray.cluster_utils import Cluster

    from pipeline.remote_store import open_store
    from pipeline.runner import load_run_index
    from pipeline.store import ArtifactStore
    from tests.s3_server import make_bucket, s3_server

    driver_mirror, node_mirror = workdir / "driver-mirror", workdir / "node-b-mirror"
    os.environ["PRETRAIN_MIRROR"] = str(driver_mirror)
    with s3_server():  # before the cluster: its raylets and workers inherit the endpoint
        url = f"{make_bucket('multinode')}/gpt-tiny"
        cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
        try:
            cluster.add_node(num_cpus=1, env_vars={"PRETRAIN_MIRROR": str(node_mirror)})
            cluster.wait_for_nodes()
            common = ("-o", f"ray.address={cluster.address}", "-o", "pretrain.max_steps=4",
                      "-o", "pretrain.checkpoint_every=2", "-o", "pretrain.eval_every=4")
            small = ("-o", "finetune.max_train_examples=64", "-o", "evaluate.tasks=[copa]",
                     "-o", "evaluate.max_examples=4")
            cli("run", CONFIG, "-o", f"workdir={url}", *common, *small,
                *(f"--only={stage}" for stage in BUCKET_STAGES))
            local = workdir / "local"
            cli("run", CONFIG, "-o", f"workdir={local}", *common, *(f"--only={stage}" for stage in DATA_STAGES))
        finally:
            cluster.shutdown()

        index = load_run_index(url)
        bucket = open_store(url)
        reference = ArtifactStore(local)
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

    on_node_b = staged_on_node(node_mirror)
    print(f"files node B fetched or uploaded, per stage: {on_node_b}", flush=True)
    for stage in ("ingest", "dataset", "pretrain", "finetune", "evaluate"):
        assert on_node_b.get(stage, 0) > 0, f"no {stage} work ran on node B: {on_node_b}"
    print("MULTINODE BUCKET OK", flush=True)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
