"""A training worker process is SIGKILLed mid-run: Ray Train (FailureConfig(max_failures=1))
restarts the worker group from the last committed checkpoint, and the pretrain stage still
ends at max_steps with a finite, sane loss. Real Ray (the session instance), real
DeepSpeed ZeRO-2 on 2 CPU workers, the stage's own entry point.

The run is also configured through a user's raw DeepSpeed JSON (pretrain.deepspeed_config),
as a long cluster job would be: the override it makes is reported in the stage metrics
and in deepspeed_config.json, and the workers' engines (restarted ones included) use it.
"""

from __future__ import annotations

import json
import math
import os
import signal
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

import stages.pretrain.run as pretrain_stage
from stages.pretrain.config import PretrainConfig
from tests.support.counting_dataset import TINY_GPT, VOCAB_SIZE, logged_records, write_stage_inputs
from tests.support.fault_injection import FreezeOnceContext, pid_recording_loop

pytestmark = pytest.mark.ray

CHECKPOINT_AT, FREEZE_AT, MAX_STEPS = 4, 6, 8
CONFIG = dict(
    model=TINY_GPT, num_workers=2, zero_stage=2, precision="fp32", micro_batch_size=4, lr=1e-2,
    warmup_steps=2, max_steps=MAX_STEPS, log_every=1, eval_every=MAX_STEPS, eval_batches=2,
    checkpoint_every=CHECKPOINT_AT, max_failures=1,
)


def kill_rank1_when_frozen(output_dir: Path, killed: dict) -> None:
    """Once rank 0 has frozen after step FREEZE_AT and the checkpoint at CHECKPOINT_AT is
    committed, SIGKILL rank 1's process (the first attempt's)."""
    snapshot = output_dir / "ray" / "pretrain" / "checkpoint_manager_snapshot.json"
    deadline = time.time() + 300
    while time.time() < deadline:
        pids = sorted((output_dir / "pids").glob("rank1-*")) if (output_dir / "pids").is_dir() else []
        committed = snapshot.is_file() and f"checkpoint-step{CHECKPOINT_AT:08d}" in snapshot.read_text()
        if pids and committed and (output_dir / "frozen-once").exists():
            pid = int(pids[0].name.split("-")[1])
            os.kill(pid, signal.SIGKILL)
            killed["pid"] = pid
            return
        time.sleep(0.2)


def test_a_killed_worker_is_replaced_and_the_run_finishes(ray_session, tmp_path, monkeypatch):
    inputs = write_stage_inputs(tmp_path / "inputs")
    output_dir = tmp_path / "pretrain"
    user_json = tmp_path / "deepspeed.json"
    user_json.write_text(json.dumps({"gradient_clipping": 0.5, "zero_optimization": {"reduce_bucket_size": 10**6}}))
    monkeypatch.setattr(pretrain_stage, "train_loop_per_worker", pid_recording_loop)
    killed: dict = {}
    killer = threading.Thread(target=kill_rank1_when_frozen, args=(output_dir, killed), daemon=True)
    killer.start()
    started = time.time()
    metrics = pretrain_stage.run(FreezeOnceContext(
        name="pretrain", config=PretrainConfig(**CONFIG, deepspeed_config=str(user_json)), experiment=SimpleNamespace(seed=0),
        output_dir=output_dir, inputs=inputs, freeze_at=FREEZE_AT))
    killer.join(timeout=5)
    print(f"run with one killed worker: {time.time() - started:.1f}s")

    assert "pid" in killed, "the worker was never killed: the run did not reach the freeze point"
    # A second attempt started: rank 1 got a new process.
    rank1_pids = {int(p.name.split("-")[1]) for p in (output_dir / "pids").glob("rank1-*")}
    assert killed["pid"] in rank1_pids and len(rank1_pids) == 2
    assert metrics["steps"] == MAX_STEPS and metrics["resumed_from_step"] == CHECKPOINT_AT
    steps = [r["step"] for r in logged_records(output_dir)]
    # The first attempt logged up to the freeze; the second dropped the records past its
    # checkpoint and logged from there on: every step once.
    assert steps == list(range(1, MAX_STEPS + 1))
    assert math.isfinite(metrics["final_loss"]) and metrics["final_loss"] < math.log(VOCAB_SIZE)
    assert math.isfinite(metrics["val_loss"])
    assert (output_dir / "model" / "model.safetensors").is_file()

    # The user's DeepSpeed JSON: reported, recorded, and what the engines ran with.
    assert metrics["deepspeed_overrides"] == "gradient_clipping: ours 1.0, theirs 0.5"
    record = json.loads((output_dir / "deepspeed_config.json").read_text())
    assert record["merged"]["zero_optimization"]["reduce_bucket_size"] == 10**6
    model_states = output_dir / "ray" / "pretrain" / f"checkpoint-step{MAX_STEPS:08d}" / f"global_step{MAX_STEPS}"
    saved = torch.load(model_states / "mp_rank_00_model_states.pt", weights_only=False)["ds_config"]
    assert saved["gradient_clipping"] == 0.5 and saved["zero_optimization"]["reduce_bucket_size"] == 10**6
