"""DeepSpeed config per ZeRO stage, AdamW parameter groups, and the config exercised by a
real (single-process, gloo) DeepSpeed engine for every ZeRO stage. No Ray."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from stages.models import GPT, GPTConfig
from stages.training.deepspeed_config import build_deepspeed_config, build_param_groups

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_common_fields_for_every_zero_stage(stage):
    config = build_deepspeed_config(micro_batch_size=8, gradient_accumulation_steps=4, zero_stage=stage,
                                    gradient_clipping=0.5)
    assert config["train_micro_batch_size_per_gpu"] == 8
    assert config["gradient_accumulation_steps"] == 4
    assert "train_batch_size" not in config  # DeepSpeed derives it from the world size
    assert config["gradient_clipping"] == 0.5
    assert config["zero_optimization"]["stage"] == stage
    assert config["zero_allow_untested_optimizer"] is True  # we pass torch AdamW
    assert "optimizer" not in config and "scheduler" not in config  # client-side objects
    assert config["bf16"] == {"enabled": False} and config["fp16"] == {"enabled": False}
    json.dumps(config)  # plain data: travels to workers and into logs


def test_zero_stage_specific_settings():
    assert build_deepspeed_config(micro_batch_size=1, zero_stage=0)["zero_optimization"] == {"stage": 0}
    for stage in (1, 2):
        zero = build_deepspeed_config(micro_batch_size=1, zero_stage=stage)["zero_optimization"]
        assert zero == {"stage": stage, "overlap_comm": False, "contiguous_gradients": True}
    zero3 = build_deepspeed_config(micro_batch_size=1, zero_stage=3)["zero_optimization"]
    assert zero3["stage3_gather_16bit_weights_on_model_save"] is True


def test_bf16_switch():
    assert build_deepspeed_config(micro_batch_size=1, precision="bf16")["bf16"] == {"enabled": True}


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(micro_batch_size=1, zero_stage=4), "zero_stage"),
        (dict(micro_batch_size=1, precision="fp16"), "precision"),
        (dict(micro_batch_size=0), "micro_batch_size"),
    ],
)
def test_bad_settings_are_rejected(kwargs, message):
    with pytest.raises(ValueError, match=message):
        build_deepspeed_config(**kwargs)


def test_weight_decay_skips_biases_and_norms_and_counts_tied_weights_once():
    model = GPT(GPTConfig(vocab_size=50, max_seq_len=8, num_layers=2, hidden_size=16, num_heads=2))
    decay, no_decay = build_param_groups(model, weight_decay=0.1)
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    names = {id(p): n for n, p in model.named_parameters()}
    decayed = {names[id(p)] for p in decay["params"]}
    assert "token_embedding.weight" in decayed and "blocks.0.attn.qkv_proj.weight" in decayed
    assert all(not n.endswith(".bias") and "norm" not in n for n in decayed)
    not_decayed = {names[id(p)] for p in no_decay["params"]}
    assert "final_norm.weight" in not_decayed and "blocks.1.mlp.fc_out.bias" in not_decayed
    assert len(decay["params"]) + len(no_decay["params"]) == len(list(model.parameters()))
    assert sum(p.numel() for g in (decay, no_decay) for p in g["params"]) == model.num_parameters()


# A real DeepSpeed engine per ZeRO stage, in a subprocess: initialising torch.distributed
# and DeepSpeed's global communicator inside the pytest process would leak into other tests.
ENGINE_SCRIPT = r"""
import json, os, torch
import torch.distributed as dist
from stages.models import GPT, GPTConfig
from stages.training.deepspeed_config import build_deepspeed_config
from stages.training.engine import full_fp32_state_dict, initialize_engine, optimizer_step
from stages.training.schedule import WarmupDecaySchedule

dist.init_process_group("gloo", rank=0, world_size=1)
config = GPTConfig(vocab_size=64, max_seq_len=16, num_layers=2, hidden_size=32, num_heads=4)
ids = torch.randint(0, 64, (4, 16), generator=torch.Generator().manual_seed(0))
results = {}
for stage, precision in [(0, "fp32"), (1, "fp32"), (2, "fp32"), (3, "fp32"), (2, "bf16")]:
    torch.manual_seed(0)
    engine = initialize_engine(
        GPT(config), lr=1e-2, weight_decay=0.1,
        schedule=WarmupDecaySchedule(warmup_steps=0, max_steps=8, decay="constant"),
        ds_config=build_deepspeed_config(micro_batch_size=2, gradient_accumulation_steps=2,
                                         zero_stage=stage, precision=precision))
    losses, grad_norms = [], []
    for step in range(8):
        step_loss = 0.0
        for micro in range(2):
            _, loss = engine(ids[2 * micro: 2 * micro + 2], labels=ids[2 * micro: 2 * micro + 2])
            engine.backward(loss)
            norm = optimizer_step(engine)
            assert (norm is None) == (micro == 0)  # a norm only when the optimizer stepped
            step_loss += loss.item() / 2
        losses.append(step_loss)
        grad_norms.append(norm)
    state = full_fp32_state_dict(engine)
    fresh = GPT(config).eval()
    fresh.load_state_dict(state, strict=True)
    engine.eval()
    with torch.no_grad():
        ours = fresh(ids, labels=ids)[1].item()
        theirs = engine(ids, labels=ids)[1].float().item()
    results[f"{stage}-{precision}"] = {"losses": losses, "grad_norms": grad_norms, "exported_loss": ours, "engine_loss": theirs,
                                       "global_steps": engine.global_steps,
                                       "dtypes": sorted({str(t.dtype) for t in state.values()})}
print("RESULTS" + json.dumps(results))
"""


@pytest.fixture(scope="module")
def engine_results():
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "DS_ACCELERATOR": "cpu", "MASTER_ADDR": "127.0.0.1",
           "MASTER_PORT": "29517", "RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", ENGINE_SCRIPT], env=env, cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=600)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULTS")]
    assert done.returncode == 0 and lines, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads(lines[-1][len("RESULTS"):])


def test_every_zero_stage_trains_the_same_with_one_worker(engine_results):
    # With one worker, ZeRO shards nothing: every stage must do the same AdamW math
    # (clipping, accumulation, weight decay groups), so the losses agree.
    reference = engine_results["0-fp32"]["losses"]
    assert reference[-1] < 0.7 * reference[0]
    for stage in (1, 2, 3):
        assert engine_results[f"{stage}-fp32"]["losses"] == pytest.approx(reference, rel=1e-4)
    for result in engine_results.values():
        assert result["global_steps"] == 8  # one optimizer step per 2 micro batches
        # The logged gradient norm (before clipping) is computed by every stage alike.
        assert result["grad_norms"] == pytest.approx(engine_results["0-fp32"]["grad_norms"], rel=0.05)


def test_exported_fp32_weights_reproduce_the_engine(engine_results):
    for name, result in engine_results.items():
        assert result["dtypes"] == ["torch.float32"], name
        if name.endswith("fp32"):
            assert result["exported_loss"] == pytest.approx(result["engine_loss"], rel=1e-5), name


def test_bf16_trains(engine_results):
    losses = engine_results["2-bf16"]["losses"]
    assert all(torch.isfinite(torch.tensor(losses))) and losses[-1] < 0.8 * losses[0]
    # The exported fp32 master weights score close to the bf16 engine.
    result = engine_results["2-bf16"]
    assert result["exported_loss"] == pytest.approx(result["engine_loss"], rel=0.05)
