"""A ZeRO checkpoint resumed on another number of processes continues exactly as the
run that wrote it would have: stages.training.checkpoint's resharding path (DeepSpeed's
universal checkpoint) restores weights, Adam moments, step counter and lr schedule.

Real DeepSpeed engines in gloo process groups (torch.multiprocessing, no Ray), in a
subprocess so that no process group leaks into the test session. The global batch of
each step is the same whatever the world size (each rank takes its slice), so after
the switch the losses must match the uninterrupted run's to float rounding.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]

SCRIPT = r"""
import json, os, socket, sys, tempfile
import torch, torch.distributed as dist, torch.multiprocessing as mp
from pathlib import Path
from stages.models import GPT, GPTConfig
from stages.training.checkpoint import _load_resharded
from stages.training.deepspeed_config import build_deepspeed_config
from stages.training.engine import initialize_engine, optimizer_step
from stages.training.schedule import WarmupDecaySchedule
from tests.support.pretraining_loss import causal_lm_loss

GLOBAL_BATCH, SAVE_AT, MORE = 4, 4, 3

def worker(rank, world_size, port, stage, mode, directory, out):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), LOCAL_RANK=str(rank),
                      WORLD_SIZE=str(world_size))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    torch.manual_seed(0)
    engine = initialize_engine(
        GPT(GPTConfig(vocab_size=64, max_seq_len=16, num_layers=2, hidden_size=32, num_heads=4)),
        lr=1e-2, weight_decay=0.1, schedule=WarmupDecaySchedule(warmup_steps=2, max_steps=20, decay="cosine"),
        ds_config=build_deepspeed_config(micro_batch_size=GLOBAL_BATCH // world_size, zero_stage=stage))
    start = 0
    if mode == "resume":
        assert _load_resharded(engine, Path(directory)) is not None
        start = engine.global_steps
    losses, lrs = [], []
    for step in range(start, SAVE_AT + MORE):
        ids = torch.randint(0, 64, (GLOBAL_BATCH, 16), generator=torch.Generator().manual_seed(step))
        part = ids[rank * GLOBAL_BATCH // world_size:(rank + 1) * GLOBAL_BATCH // world_size]
        lrs.append(engine.get_lr()[0])
        loss = causal_lm_loss(engine(part), part)
        engine.backward(loss)
        optimizer_step(engine)
        mean = torch.tensor([loss.item()], dtype=torch.float64)
        dist.all_reduce(mean)
        losses.append(mean.item() / world_size)
        if mode == "write" and step + 1 == SAVE_AT:
            engine.save_checkpoint(directory, tag=f"global_step{SAVE_AT}")
    if rank == 0:
        Path(out).write_text(json.dumps({"losses": losses[-MORE:], "lrs": lrs[-MORE:], "start": start}))
    dist.barrier()
    # Skip interpreter teardown: destroying DeepSpeed's and gloo's threads at exit now and
    # then aborts ("terminate called without an active exception") after the work is done.
    os._exit(0)

def free_port():
    with socket.socket() as probe:  # a fixed port may still be held by an earlier run
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]

if __name__ == "__main__":
    results = {}
    for stage, before, after in [(2, 2, 1), (3, 1, 2)]:
        directory = tempfile.mkdtemp()
        for mode, world_size in (("write", before), ("resume", after)):
            out = f"{directory}/{mode}.json"
            mp.spawn(worker, args=(world_size, free_port(), stage, mode, directory, out), nprocs=world_size)
            results[f"zero{stage}-{before}to{after}-{mode}"] = json.loads(Path(out).read_text())
    print("RESULTS" + json.dumps(results))
"""


@pytest.fixture(scope="module")
def reshard_results(tmp_path_factory):
    # A file, not `python -c`: spawned processes re-import the script to find `worker`.
    script = tmp_path_factory.mktemp("reshard") / "reshard.py"
    script.write_text(SCRIPT)
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "DS_ACCELERATOR": "cpu", "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, str(script)], env=env, cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=600)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULTS")]
    assert done.returncode == 0 and lines, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads(lines[-1][len("RESULTS"):])


@pytest.mark.parametrize("case", ["zero2-2to1", "zero3-1to2"])
def test_resharded_resume_continues_the_uninterrupted_run(reshard_results, case):
    written, resumed = reshard_results[f"{case}-write"], reshard_results[f"{case}-resume"]
    assert resumed["start"] == 4  # DeepSpeed's step counter came back
    assert resumed["lrs"] == pytest.approx(written["lrs"], rel=1e-9)  # the schedule's position too
    # Weights, and Adam's moments: with fresh moments the first update would differ.
    assert resumed["losses"] == pytest.approx(written["losses"], rel=1e-5)
