"""Train the pretrain stage across two simulated Ray nodes on this machine; exit non-zero
on failure. Run by tests/integration/test_pretrain_multinode.py in its own process,
because a Ray cluster cannot share the test session's Ray instance.

    python tests/multinode_pretrain.py WORKDIR

`ray.cluster_utils.Cluster` starts a head with no CPUs and two nodes with one CPU each,
each its own raylet and object store, so the two training workers (one CPU each) must be
placed on different nodes and DeepSpeed's gloo process group spans both. Each worker
records the node it ran on; the stage must finish max_steps with a sane loss.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

MAX_STEPS = 6


def node_recording_loop(loop_config: dict) -> None:
    """The stage's training loop, after writing down which node this rank runs on."""
    import ray
    import ray.train

    from stages.pretrain.job import PretrainJob
    from stages.pretrain.train_loop import train_loop_per_worker

    rank = ray.train.get_context().get_world_rank()
    nodes_dir = PretrainJob.from_loop_config(loop_config).output_dir / "nodes"
    nodes_dir.mkdir(exist_ok=True)
    (nodes_dir / f"rank{rank}").write_text(ray.get_runtime_context().get_node_id())
    train_loop_per_worker(loop_config)


def main(workdir: Path) -> None:
    import ray
    from ray.cluster_utils import Cluster

    import stages.pretrain.run as pretrain_stage
    from tests.counting_dataset import TINY_GPT, VOCAB_SIZE, logged_records, pretrain_context, write_stage_inputs

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    try:
        worker_nodes = {cluster.add_node(num_cpus=1).node_id for _ in range(2)}
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, log_to_driver=False,
                 runtime_env={"env_vars": {"PYTHONPATH": str(REPO_ROOT)}})
        inputs = write_stage_inputs(workdir / "inputs")
        output_dir = workdir / "pretrain"
        # Wrap the stage's own loop (the driver side stays the real stage).
        pretrain_stage.train_loop_per_worker = node_recording_loop
        metrics = pretrain_stage.run(pretrain_context(
            output_dir, inputs, model=TINY_GPT, num_workers=2, zero_stage=2, micro_batch_size=4, lr=1e-2,
            warmup_steps=2, max_steps=MAX_STEPS, log_every=1, eval_every=MAX_STEPS, eval_batches=2,
            checkpoint_every=MAX_STEPS, max_failures=0))

        nodes = {path.name: path.read_text() for path in (output_dir / "nodes").iterdir()}
        print(json.dumps({"metrics": metrics, "nodes": nodes, "worker_nodes": sorted(worker_nodes)}))
        if sorted(nodes) != ["rank0", "rank1"] or len(set(nodes.values())) != 2:
            raise SystemExit(f"expected two ranks on two different nodes, got {nodes}")
        if not set(nodes.values()) <= worker_nodes:
            raise SystemExit(f"a rank ran on the head node (which has no CPUs): {nodes}")
        steps = [r["step"] for r in logged_records(output_dir)]
        if metrics["steps"] != MAX_STEPS or steps != list(range(1, MAX_STEPS + 1)):
            raise SystemExit(f"the run did not train steps 1..{MAX_STEPS}: {steps}, {metrics}")
        if not (math.isfinite(metrics["final_loss"]) and metrics["final_loss"] < math.log(VOCAB_SIZE) + 0.5):
            raise SystemExit(f"final loss is not sane: {metrics['final_loss']}")
        if not (output_dir / "model" / "model.safetensors").is_file():
            raise SystemExit("the trained model was not exported")
    finally:
        ray.shutdown()
        cluster.shutdown()
    print("MULTINODE OK")


if __name__ == "__main__":
    main(Path(sys.argv[1]).resolve())
