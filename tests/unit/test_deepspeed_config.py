"""DeepSpeed config per ZeRO stage, offload, fp16 loss scaling, a user's JSON merged over
ours, AdamW parameter groups, and the config exercised by a real (single-process, gloo)
DeepSpeed engine for every ZeRO stage and offload setting. No Ray."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from stages.models import GPT, GPTConfig
from stages.pretrain.config import PretrainConfig
from stages.training.deepspeed_config import (
    build_deepspeed_config,
    build_param_groups,
    deepspeed_config_for,
    resolve_deepspeed_config,
)
from stages.training.deepspeed_overrides import Override, merge_deepspeed_config, read_deepspeed_json
from stages.training.engine_settings import EngineSettings, LossScaling

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


def test_fp16_gets_dynamic_loss_scaling():
    config = build_deepspeed_config(micro_batch_size=1, precision="fp16", loss_scaling=LossScaling(
        initial_scale_power=12, loss_scale_window=200, hysteresis=3, min_loss_scale=0.5))
    assert config["fp16"] == {"enabled": True, "loss_scale": 0, "initial_scale_power": 12,
                              "loss_scale_window": 200, "hysteresis": 3, "min_loss_scale": 0.5}
    assert config["bf16"] == {"enabled": False}


def test_offload_sections_and_the_torch_optimizer_switch():
    plain = build_deepspeed_config(micro_batch_size=1, zero_stage=2)
    assert "offload_optimizer" not in plain["zero_optimization"] and "zero_force_ds_cpu_optimizer" not in plain
    zero2 = build_deepspeed_config(micro_batch_size=1, zero_stage=2, offload_optimizer=True)
    assert zero2["zero_optimization"]["offload_optimizer"] == {"device": "cpu"}
    assert "offload_param" not in zero2["zero_optimization"]
    # Without it DeepSpeed refuses torch AdamW under offload (it wants its compiled CPU Adam).
    assert zero2["zero_force_ds_cpu_optimizer"] is False
    zero3 = build_deepspeed_config(micro_batch_size=1, zero_stage=3, offload_optimizer=True, offload_param=True)
    assert zero3["zero_optimization"]["offload_param"] == {"device": "cpu"}


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(micro_batch_size=1, zero_stage=4), "zero_stage"),
        (dict(micro_batch_size=1, precision="fp8"), "precision"),
        (dict(micro_batch_size=0), "micro_batch_size"),
        (dict(micro_batch_size=1, zero_stage=0, offload_optimizer=True), "offload_optimizer needs zero_stage 1, 2 or 3"),
        (dict(micro_batch_size=1, zero_stage=2, offload_param=True), "offload_param needs zero_stage 3"),
    ],
)
def test_bad_settings_are_rejected(kwargs, message):
    with pytest.raises(ValueError, match=message):
        build_deepspeed_config(**kwargs)


@pytest.mark.parametrize(
    "settings, message",
    [
        (dict(precision="fp16"), "precision fp16 needs GPUs.*gpus_per_worker: 1"),
        (dict(zero_stage=0, offload_optimizer=True), "offload_optimizer needs zero_stage 1, 2 or 3"),
        (dict(zero_stage=2, offload_param=True), "offload_param needs zero_stage 3"),
        (dict(lr_decay="inverse_sqrt", warmup_steps=0), "inverse_sqrt needs warmup_steps >= 1"),
    ],
)
def test_pretrain_config_refuses_settings_that_cannot_train(settings, message):
    with pytest.raises(ValueError, match=message):
        PretrainConfig(**settings)


def test_config_from_the_pretrain_section():
    cfg = PretrainConfig(micro_batch_size=3, gradient_accumulation_steps=2, zero_stage=3, precision="fp16",
                         gpus_per_worker=1, offload_optimizer=True, offload_param=True,
                         loss_scaling={"initial_scale_power": 10, "hysteresis": 4})
    config, overrides = deepspeed_config_for(EngineSettings.from_pretrain(cfg))
    assert overrides == []
    assert config["train_micro_batch_size_per_gpu"] == 3 and config["gradient_accumulation_steps"] == 2
    assert config["zero_optimization"]["offload_param"] == {"device": "cpu"}
    assert config["fp16"]["initial_scale_power"] == 10 and config["fp16"]["hysteresis"] == 4
    assert config["fp16"]["loss_scale_window"] == 1000  # the default


def test_user_config_wins_and_every_replaced_value_is_reported():
    ours = build_deepspeed_config(micro_batch_size=4, zero_stage=2)
    theirs = {"zero_optimization": {"stage": 3, "reduce_bucket_size": 5e7, "overlap_comm": False},
              "gradient_clipping": 0.5, "bf16": {"enabled": True}, "communication_data_type": "fp32"}
    merged, overrides = merge_deepspeed_config(ours, theirs)
    assert merged["zero_optimization"] == {"stage": 3, "overlap_comm": False, "contiguous_gradients": True,
                                           "reduce_bucket_size": 5e7}
    assert merged["gradient_clipping"] == 0.5 and merged["bf16"] == {"enabled": True}
    assert merged["communication_data_type"] == "fp32"  # new keys are added
    # Only values of ours that changed are overrides; equal values and new keys are not.
    assert overrides == [Override("zero_optimization.stage", 2, 3), Override("gradient_clipping", 1.0, 0.5),
                         Override("bf16.enabled", False, True)]
    assert str(overrides[0]) == "zero_optimization.stage: ours 2, theirs 3"
    assert ours["zero_optimization"]["stage"] == 2  # inputs untouched


def test_a_user_object_replacing_a_plain_value_is_one_override():
    merged, overrides = merge_deepspeed_config({"a": 1, "b": {"c": 2}}, {"a": {"x": 1}, "b": 7})
    assert merged == {"a": {"x": 1}, "b": 7}
    assert overrides == [Override("a", 1, {"x": 1}), Override("b", {"c": 2}, 7)]


def test_malformed_json_names_the_file_and_line(tmp_path):
    path = tmp_path / "ds.json"
    path.write_text('{\n  "zero_optimization": {\n    "stage": 3,\n  }\n}\n')  # trailing comma
    with pytest.raises(ValueError, match=rf"{path}:4:3: not valid JSON .*pretrain.deepspeed_config"):
        read_deepspeed_json(path, "pretrain.deepspeed_config")
    path.write_text("[1, 2]")
    with pytest.raises(ValueError, match="must hold a JSON object"):
        read_deepspeed_json(path, "pretrain.deepspeed_config")
    with pytest.raises(FileNotFoundError, match="pretrain.deepspeed_config: .*missing.json does not exist"):
        read_deepspeed_json(tmp_path / "missing.json", "pretrain.deepspeed_config")


@pytest.mark.parametrize("section, fix", [("optimizer", "AdamW"), ("scheduler", "lr_decay"),
                                          ("gradient_accumulation_steps", "pretrain.gradient_accumulation_steps")])
def test_sections_the_trainer_owns_are_refused_with_their_line(tmp_path, section, fix):
    path = tmp_path / "ds.json"
    path.write_text('{\n  "bf16": {"enabled": true},\n  "%s": {}\n}\n' % section)
    with pytest.raises(ValueError, match=rf"{path}:3: remove '{section}'.*{fix}"):
        read_deepspeed_json(path, "pretrain.deepspeed_config")


def test_the_resolved_config_is_written_and_overrides_logged(tmp_path, caplog):
    user_file = tmp_path / "ds.json"
    user_file.write_text(json.dumps({"zero_optimization": {"stage": 1}, "prescale_gradients": True}))
    cfg = PretrainConfig(zero_stage=2, deepspeed_config=str(user_file))
    with caplog.at_level("WARNING"):
        user, overrides = resolve_deepspeed_config(EngineSettings.from_pretrain(cfg), cfg.deepspeed_config, tmp_path)
    assert user == {"zero_optimization": {"stage": 1}, "prescale_gradients": True}
    assert [str(o) for o in overrides] == ["zero_optimization.stage: ours 2, theirs 1"]
    assert "zero_optimization.stage: ours 2, theirs 1" in caplog.text and str(user_file) in caplog.text
    record = json.loads((tmp_path / "deepspeed_config.json").read_text())
    assert record["overrides"] == [{"key": "zero_optimization.stage", "ours": 2, "theirs": 1}]
    assert record["generated"]["zero_optimization"]["stage"] == 2
    assert record["merged"]["zero_optimization"]["stage"] == 1 and record["merged"]["prescale_gradients"] is True
    # Without a user file: the generated config is recorded all the same.
    assert resolve_deepspeed_config(EngineSettings.from_pretrain(PretrainConfig()), None, tmp_path) == (None, [])
    assert json.loads((tmp_path / "deepspeed_config.json").read_text())["overrides"] == []


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
from stages.pretrain.config import PretrainConfig
from stages.training.engine import create_engine, full_fp32_state_dict, initialize_engine, optimizer_step
from stages.training.engine_settings import EngineSettings
from stages.training.schedule import WarmupDecaySchedule
from tests.support.pretraining_loss import causal_lm_loss

dist.init_process_group("gloo", rank=0, world_size=1)
config = GPTConfig(vocab_size=64, max_seq_len=16, num_layers=2, hidden_size=32, num_heads=4)
ids = torch.randint(0, 64, (4, 16), generator=torch.Generator().manual_seed(0))
results = {}
RUNS = [(0, "fp32", ""), (1, "fp32", ""), (2, "fp32", ""), (3, "fp32", ""), (2, "bf16", ""),
        (1, "fp32", "offload"), (2, "fp32", "offload"), (3, "fp32", "offload+params"), (3, "bf16", "offload+params")]
for stage, precision, offload in RUNS:
    torch.manual_seed(0)
    engine = initialize_engine(
        GPT(config), lr=1e-2, weight_decay=0.1,
        schedule=WarmupDecaySchedule(warmup_steps=0, max_steps=8, decay="constant"),
        ds_config=build_deepspeed_config(micro_batch_size=2, gradient_accumulation_steps=2,
                                         zero_stage=stage, precision=precision,
                                         offload_optimizer=bool(offload), offload_param=offload.endswith("params")))
    losses, grad_norms = [], []
    for step in range(8):
        step_loss = 0.0
        for micro in range(2):
            rows = ids[2 * micro: 2 * micro + 2]
            loss = causal_lm_loss(engine(rows), rows)
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
        ours = causal_lm_loss(fresh(ids), ids).item()
        theirs = causal_lm_loss(engine(ids), ids).float().item()
    if (stage, precision, offload) == (2, "fp32", ""):
        # The loss scaler is part of the ZeRO optimizer's checkpoint (fp16's dynamic one
        # is the same attribute), so a resumed run keeps its scale.
        engine.save_checkpoint(os.environ["CHECKPOINT_DIR"] + f"/{precision}", tag="t")
        shard = torch.load(os.environ["CHECKPOINT_DIR"] + f"/{precision}/t/zero_pp_rank_0_mp_rank_00_optim_states.pt",
                           weights_only=False)["optimizer_state_dict"]
        results[f"scaler-{precision}"] = [type(shard["loss_scaler"]).__name__, shard["dynamic_loss_scale"]]
    results[f"{stage}-{precision}{'-' + offload if offload else ''}"] = {"losses": losses, "grad_norms": grad_norms, "exported_loss": ours, "engine_loss": theirs,
                                       "global_steps": engine.global_steps,
                                       "dtypes": sorted({str(t.dtype) for t in state.values()})}
# The real entry point, given a GPU config for fp16 on this CPU-only machine. DeepSpeed's
# CPU accelerator has fp16 only where oneDNN does (AVX512-FP16 / AMX-FP16 CPUs): there the
# engine is built; elsewhere our clear error comes first. Both are recorded, the second
# also with the probe answering "no", so that the error is checked on every CPU.
from deepspeed.accelerator import get_accelerator
fp16_settings = EngineSettings.from_pretrain(PretrainConfig(precision="fp16", gpus_per_worker=1))
results["fp16-supported"] = bool(get_accelerator().is_fp16_supported())
for probe in ("real", "no-fp16"):
    if probe == "no-fp16":
        get_accelerator().is_fp16_supported = lambda: False
    try:
        create_engine(GPT(config), fp16_settings)
        results[f"fp16-{probe}"] = "engine built"
    except RuntimeError as error:
        results[f"fp16-{probe}"] = str(error)
print("RESULTS" + json.dumps(results))
"""


@pytest.fixture(scope="module")
def engine_results(tmp_path_factory):
    env = {"CHECKPOINT_DIR": str(tmp_path_factory.mktemp("checkpoints")), **os.environ, "PYTHONPATH": str(REPO_ROOT), "DS_ACCELERATOR": "cpu", "MASTER_ADDR": "127.0.0.1",
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
    for name, result in engine_results.items():
        if not name[0].isdigit():
            continue
        assert result["global_steps"] == 8  # one optimizer step per 2 micro batches
        # The logged gradient norm (before clipping) is computed by every stage alike.
        assert result["grad_norms"] == pytest.approx(engine_results["0-fp32"]["grad_norms"], rel=0.05)


def test_offloaded_optimizer_and_parameters_train_like_the_reference_with_torch_adamw(engine_results):
    reference = engine_results["0-fp32"]["losses"]
    for name in ("1-fp32-offload", "2-fp32-offload", "3-fp32-offload+params"):
        assert engine_results[name]["losses"] == pytest.approx(reference, rel=1e-4), name
    assert engine_results["3-bf16-offload+params"]["losses"] == pytest.approx(
        engine_results["2-bf16"]["losses"], rel=1e-2)


def test_fp16_on_a_cpu_without_fp16_is_a_clear_error(engine_results):
    message = engine_results["fp16-no-fp16"]
    assert "fp16 training needs a GPU" in message and "'cpu' accelerator" in message
    assert "use precision bf16" in message.lower()
    if engine_results["fp16-supported"]:  # this CPU has fp16 matrix units: DeepSpeed builds the engine
        assert engine_results["fp16-real"] == "engine built"
    else:
        assert engine_results["fp16-real"] == message


def test_loss_scaler_state_is_in_the_checkpoint(engine_results):
    assert engine_results["scaler-fp32"][0] == "LossScaler"  # static scale 1 outside fp16
    assert engine_results["scaler-fp32"][1] is False


def test_exported_fp32_weights_reproduce_the_engine(engine_results):
    for name, result in engine_results.items():
        if not name[0].isdigit():
            continue
        assert result["dtypes"] == ["torch.float32"], name
        if name.endswith("fp32"):
            assert result["exported_loss"] == pytest.approx(result["engine_loss"], rel=1e-5), name


def test_bf16_trains(engine_results):
    losses = engine_results["2-bf16"]["losses"]
    assert all(torch.isfinite(torch.tensor(losses))) and losses[-1] < 0.8 * losses[0]
    # The exported fp32 master weights score close to the bf16 engine.
    result = engine_results["2-bf16"]
    assert result["exported_loss"] == pytest.approx(result["engine_loss"], rel=0.05)
