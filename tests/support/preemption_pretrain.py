"""A pretrain run told twice that a node goes away saves a checkpoint at the next step
boundary each time, restarts from it, and ends exactly as the uninterrupted run; exit
non-zero on failure. Run by tests/integration/test_pretrain_preemption.py in its own
process (a Ray cluster cannot share the test session's Ray instance).

    python tests/support/preemption_pretrain.py WORKDIR

`ray.cluster_utils.Cluster`: a head with no CPUs and three nodes with one CPU each, so the
two training workers run on two nodes and the third is where a restart goes when one of
them is drained. The same cluster trains twice with the same config (fp32, ZeRO-2,
periodic checkpoints only at the end):

1. uninterrupted;
2. preempted: rank 0, once it has logged step SIGTERM_AT, sends SIGTERM to its own
   process (rank 1 learns it only through the ranks' agreement); in the next attempt, once
   it has logged step DRAIN_AT, it asks the GCS to drain rank 1's node (reason preemption,
   as a spot reclaim or the autoscaler does). Each time it waits until the warning has
   reached it (the handler ran; Ray Train's watcher marked the workers), so that the stop
   comes at that step's boundary: the tiny model trains the remaining steps in less time
   than the watcher's poll.

Each interruption must lose at most one step (last step trained before the restart minus
the checkpoint step the next attempt resumed from), every step's loss and the final
losses must equal the uninterrupted run's bit for bit, and the run must have ended on
three attempts. It prints the seconds from each signal to the first new step after the
restart, and the cost of the per-step check.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT))

from pipeline.context import StageContext  # noqa: E402
from stages.training import preemption  # noqa: E402
from stages.tracking import MetricsLog  # noqa: E402

MAX_STEPS, SIGTERM_AT, DRAIN_AT = 16, 3, 9
POLL_INTERVAL_S = "0.5"  # Ray Train's drain watcher; 5 s by default


def worker_recording_loop(loop_config: dict) -> None:
    """The stage's training loop, after writing this rank's pid and node for the signals."""
    import ray
    import ray.train

    from stages.pretrain.job import PretrainJob
    from stages.pretrain.train_loop import train_loop_per_worker

    rank = ray.train.get_context().get_world_rank()
    events = PretrainJob.from_loop_config(loop_config).output_dir / "events"
    events.mkdir(exist_ok=True)
    (events / f"rank{rank}.json").write_text(json.dumps(
        {"pid": os.getpid(), "node": ray.get_runtime_context().get_node_id()}))
    train_loop_per_worker(loop_config)


class PreemptingMetricsLog(MetricsLog):
    """Rank 0's metrics log: records each logged step with its attempt (pid) and time, and
    sends the signals at SIGTERM_AT (first attempt) and DRAIN_AT (second attempt)."""

    def __init__(self, path: Path, events: Path):
        super().__init__(path)
        self.events = events

    def log(self, record: dict[str, Any]) -> None:
        super().log(record)
        if "step" not in record or "loss" not in record:
            return
        step = record["step"]
        with open(self.events / "steps.jsonl", "a") as steps:
            steps.write(json.dumps({"pid": os.getpid(), "step": step, "time": time.time()}) + "\n")
        sigterm, drain = self.events / "sigterm.json", self.events / "drain.json"
        rank1 = json.loads((self.events / "rank1.json").read_text())
        if step == SIGTERM_AT and not sigterm.exists():
            sigterm.write_text(json.dumps({"time": time.time(), "pid": os.getpid()}))
            os.kill(os.getpid(), signal.SIGTERM)
            _wait_for(lambda: preemption._requested.is_set(), "the SIGTERM handler")
        elif step == DRAIN_AT and sigterm.exists() and not drain.exists():
            drain.write_text(json.dumps({"time": time.time(), "node": rank1["node"]}))
            _drain(rank1["node"])
            _wait_for(_marked_by_ray_train, "Ray Train's preemption mark")


def _marked_by_ray_train() -> bool:
    from ray.train.v2._internal.execution.context import get_train_context

    return get_train_context().preemption_context.preemption_info is not None


def _wait_for(condition, what: str) -> None:
    deadline = time.time() + 30
    while not condition():
        if time.time() > deadline:
            raise RuntimeError(f"{what} never came")
        time.sleep(0.01)


def _drain(node_id: str) -> None:
    import ray
    from ray.core.generated import autoscaler_pb2

    gcs = ray._raylet.GcsClient(address=ray.get_runtime_context().gcs_address)
    accepted, why = gcs.drain_node(node_id, autoscaler_pb2.DrainNodeReason.Value("DRAIN_NODE_REASON_PREEMPTION"),
                                   "test: the node is preempted", int((time.time() + 60) * 1000))
    if not accepted:
        raise RuntimeError(f"the drain of {node_id} was refused: {why}")


@dataclass
class PreemptingContext(StageContext):
    @property
    def metrics_log(self) -> MetricsLog:
        return PreemptingMetricsLog(self.output_dir / "metrics.jsonl", self.output_dir / "events")


def main(workdir: Path) -> None:
    import ray
    from ray.cluster_utils import Cluster

    import stages.pretrain.run as pretrain_stage
    from stages.pretrain.config import PretrainConfig
    from tests.support.counting_dataset import TINY_GPT, logged_records, pretrain_context, write_stage_inputs

    config = dict(model=TINY_GPT, num_workers=2, zero_stage=2, precision="fp32", micro_batch_size=4, lr=1e-2,
                  warmup_steps=2, max_steps=MAX_STEPS, log_every=1, eval_every=MAX_STEPS, eval_batches=2,
                  checkpoint_every=1000, max_failures=2)
    os.environ["RAY_TRAIN_PREEMPTION_POLL_INTERVAL_S"] = POLL_INTERVAL_S  # reaches Ray Train's controller
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    try:
        for _ in range(3):
            cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, log_to_driver=False,
                 runtime_env={"env_vars": {"PYTHONPATH": str(REPO_ROOT)}})
        inputs = write_stage_inputs(workdir / "inputs")
        baseline_dir, output_dir = workdir / "baseline", workdir / "preempted"
        started = time.time()
        baseline = pretrain_stage.run(pretrain_context(baseline_dir, inputs, **config))
        print(f"uninterrupted run: {time.time() - started:.1f}s")

        (output_dir / "events").mkdir(parents=True)
        pretrain_stage.train_loop_per_worker = worker_recording_loop
        started = time.time()
        metrics = pretrain_stage.run(PreemptingContext(
            name="pretrain", config=PretrainConfig(**config), experiment=SimpleNamespace(seed=0),
            output_dir=output_dir, inputs=dict(inputs)))
        print(f"preempted run: {time.time() - started:.1f}s")
        check(output_dir / "events", metrics, baseline, logged_records(output_dir), logged_records(baseline_dir))
    finally:
        ray.shutdown()
        cluster.shutdown()
    print("PREEMPTION OK")


def check(events: Path, metrics: dict, baseline: dict, records: list[dict], baseline_records: list[dict]) -> None:
    steps = [json.loads(line) for line in (events / "steps.jsonl").read_text().splitlines()]
    attempts: list[list[dict]] = []
    for entry in steps:
        if not attempts or attempts[-1][0]["pid"] != entry["pid"]:
            attempts.append([])
        attempts[-1].append(entry)
    ranges = [(a[0]["step"], a[-1]["step"]) for a in attempts]
    print(json.dumps({"attempts (first step, last step)": ranges, "final_loss": metrics["final_loss"]}))
    if len(attempts) != 3:
        raise SystemExit(f"expected three attempts (SIGTERM, then a drain), got steps {ranges}")
    for name, signalled_at, before, after in (("sigterm", SIGTERM_AT, attempts[0], attempts[1]),
                                              ("drain", DRAIN_AT, attempts[1], attempts[2])):
        sent = json.loads((events / f"{name}.json").read_text())
        resumed_from = after[0]["step"] - 1  # the step of the checkpoint the next attempt restored
        lost = before[-1]["step"] - resumed_from
        print(f"{name}: signal after step {signalled_at}, checkpoint of step {resumed_from}, {lost} step(s) lost, "
              f"{after[0]['time'] - sent['time']:.1f}s from the signal to the first new step")
        if lost > 1 or resumed_from < signalled_at:
            raise SystemExit(f"{name} after step {signalled_at}: the attempt trained up to step "
                             f"{before[-1]['step']} and the next resumed from step {resumed_from}")
    if metrics["steps"] != MAX_STEPS or [r["step"] for r in records] != list(range(1, MAX_STEPS + 1)):
        raise SystemExit(f"the run did not train steps 1..{MAX_STEPS} once each: {[r['step'] for r in records]}")
    # fp32, fixed seed, restored optimizer, schedule, data position and RNG: bit for bit.
    losses, expected = [r["loss"] for r in records], [r["loss"] for r in baseline_records]
    if losses != expected or (metrics["final_loss"], metrics["val_loss"]) != (baseline["final_loss"],
                                                                                baseline["val_loss"]):
        raise SystemExit(f"the preempted run's losses differ from the uninterrupted run's:\n{losses}\n{expected}")


if __name__ == "__main__":
    main(Path(sys.argv[1]).resolve())
