"""What the per-step preemption check costs: PreemptionWatch.stop_requested (one
all_reduce(MAX) of one int32 over the process group, stages/training/preemption.py) on 2
gloo processes on this machine, against the step time of the integration tests' tiny
model. No Ray: the check itself, as each rank calls it at every step boundary.

    .venv/bin/python benchmarks/preemption_check.py [--calls 2000]

The seconds from a signal to the first new step after the restart come from the Ray
cluster run, tests/support/preemption_pretrain.py (it prints them).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _rank(rank: int, world_size: int, calls: int, port: int, results) -> None:
    from stages.training import preemption

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    watch = preemption.PreemptionWatch(lambda: False)  # no SIGTERM handler needed to time the check
    for _ in range(50):  # warm-up
        watch.stop_requested()
    started = time.perf_counter()
    for _ in range(calls):
        watch.stop_requested()
    results.put((rank, (time.perf_counter() - started) / calls))
    dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args()
    context = mp.get_context("spawn")
    results = context.Queue()
    processes = [context.Process(target=_rank, args=(rank, 2, args.calls, 29731, results)) for rank in range(2)]
    for process in processes:
        process.start()
    per_call = dict(results.get(timeout=300) for _ in processes)
    for process in processes:
        process.join()
    print(f"stop_requested on 2 gloo ranks: {max(per_call.values()) * 1e6:.0f} us per step boundary "
          f"(rank 0 {per_call[0] * 1e6:.0f}, rank 1 {per_call[1] * 1e6:.0f}; {args.calls} calls)")


if __name__ == "__main__":
    main()
