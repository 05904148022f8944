"""Run a script that builds real DeepSpeed engines in a fresh Python process, as a
one-rank gloo group on DeepSpeed's CPU accelerator, and read back what it printed.

    results = run_engine_script(ENGINE_SCRIPT, "gpt2-small", omp_threads=2)

The script prints one line `RESULTS<json>`; that JSON is returned. A fresh process,
because DeepSpeed and torch.distributed keep process-wide state (the process group, the
accelerator) that a test process shares with every other test.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
MARKER = "RESULTS"


def free_port() -> int:
    """A port nobody listens on now, so parallel test runs do not collide on gloo's store."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def train_steps(model, objective, batch: dict, *, steps: int = 4, weight_decay: float = 0.1):
    """Inside an engine script: `steps` AdamW steps (lr 1e-2, constant) of ZeRO-2 bf16 on
    `batch` through the engine builder the stages use; returns (engine, losses, the last
    step's objective output)."""
    from stages.training.engine import create_engine, optimizer_step
    from stages.training.engine_settings import EngineSettings

    settings = EngineSettings(
        micro_batch_size=len(next(iter(batch.values()))), gradient_accumulation_steps=1, zero_stage=2,
        grad_clip=1.0, precision="bf16", lr=1e-2, weight_decay=weight_decay, adam_betas=(0.9, 0.95),
        warmup_steps=0, max_steps=steps, lr_decay="constant", min_lr_ratio=1.0)
    engine = create_engine(model, settings)
    losses = []
    for _ in range(steps):
        out = objective(engine, batch)
        engine.backward(out.loss)
        optimizer_step(engine)
        losses.append(out.loss.item())
    return engine, losses, out


def run_engine_script(script: str, *args: str, omp_threads: int = 1, extra_env: dict[str, str] | None = None,
                      timeout: float = 600) -> dict:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "DS_ACCELERATOR": "cpu", "MASTER_ADDR": "127.0.0.1",
           "MASTER_PORT": str(free_port()), "RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1",
           "OMP_NUM_THREADS": str(omp_threads), **(extra_env or {})}
    done = subprocess.run([sys.executable, "-c", script, *args], env=env, cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=timeout)
    lines = [line for line in done.stdout.splitlines() if line.startswith(MARKER)]
    assert done.returncode == 0 and lines, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads(lines[-1][len(MARKER):])
