"""EngineSettings (stages/training/engine_settings.py), the one input of create_engine:
from a pretrain section it gives exactly the DeepSpeed config, optimizer and schedule the
section gave before it existed; for fine-tuning, exactly what stages/finetune/worker.py
built by hand (build_deepspeed_config + initialize_engine's defaults + warmup and linear
decay). The references below are those earlier code paths, written out."""

from __future__ import annotations

import json

import pytest

from stages.finetune.config import FinetuneConfig
from stages.pretrain.config import PretrainConfig
from stages.training.deepspeed_config import build_deepspeed_config, deepspeed_config_for
from stages.training.deepspeed_overrides import merge_deepspeed_config
from stages.training.engine_settings import EngineSettings, LossScaling
from stages.training.schedule import WarmupDecaySchedule
from tests.support.engine_subprocess import run_engine_script

PRETRAIN_SECTIONS = [
    {},
    {"zero_stage": 0, "precision": "bf16", "gradient_clipping": 0.0, "micro_batch_size": 3,
     "gradient_accumulation_steps": 5, "lr_decay": "linear", "min_lr_ratio": 0.0},
    {"zero_stage": 1, "offload_optimizer": True, "optimizer_impl": "foreach", "adam_betas": (0.8, 0.9)},
    {"zero_stage": 3, "offload_optimizer": True, "offload_param": True, "precision": "bf16",
     "lr_decay": "inverse_sqrt", "warmup_steps": 4},
    {"zero_stage": 2, "precision": "fp16", "gpus_per_worker": 1, "weight_decay": 0.0,
     "loss_scaling": {"initial_scale_power": 12, "loss_scale_window": 50, "hysteresis": 3, "min_loss_scale": 0.5}},
]
USER_CONFIG = {"gradient_clipping": 0.5, "zero_optimization": {"stage": 1, "reduce_bucket_size": 1000}}


def pretrain_ds_config_before(cfg: PretrainConfig) -> dict:
    """deepspeed_config_for(cfg) as it read the pretrain section before EngineSettings."""
    scaling = cfg.loss_scaling
    return build_deepspeed_config(
        micro_batch_size=cfg.micro_batch_size, gradient_accumulation_steps=cfg.gradient_accumulation_steps,
        zero_stage=cfg.zero_stage, gradient_clipping=cfg.gradient_clipping, precision=cfg.precision,
        offload_optimizer=cfg.offload_optimizer, offload_param=cfg.offload_param,
        loss_scaling=LossScaling(initial_scale_power=scaling.initial_scale_power,
                                 loss_scale_window=scaling.loss_scale_window, hysteresis=scaling.hysteresis,
                                 min_loss_scale=scaling.min_loss_scale))


@pytest.mark.parametrize("section", PRETRAIN_SECTIONS, ids=lambda s: ",".join(s) or "defaults")
def test_a_pretrain_section_gives_the_same_deepspeed_config_byte_for_byte(section):
    cfg = PretrainConfig(**section)
    settings = EngineSettings.from_pretrain(cfg)
    ours, overrides = deepspeed_config_for(settings)
    # Key order too: output_dir/deepspeed_config.json records this dict as written.
    assert json.dumps(ours) == json.dumps(pretrain_ds_config_before(cfg)) and overrides == []
    merged, overrides = deepspeed_config_for(settings, USER_CONFIG)
    assert (json.dumps(merged), overrides) == (
        json.dumps(merge_deepspeed_config(pretrain_ds_config_before(cfg), USER_CONFIG)[0]),
        merge_deepspeed_config(pretrain_ds_config_before(cfg), USER_CONFIG)[1])
    # The optimizer and schedule create_engine built from the section.
    assert (settings.lr, settings.weight_decay, settings.adam_betas, settings.optimizer_impl) == (
        cfg.lr, cfg.weight_decay, tuple(cfg.adam_betas), cfg.optimizer_impl)
    assert settings.schedule() == WarmupDecaySchedule(warmup_steps=cfg.warmup_steps, max_steps=cfg.max_steps,
                                                      decay=cfg.lr_decay, min_lr_ratio=cfg.min_lr_ratio)


def test_the_generated_config_keeps_its_values_for_the_default_section():
    # Pinned values, not only the comparison above: a change to build_deepspeed_config
    # itself shows up here too.
    ours, _ = deepspeed_config_for(EngineSettings.from_pretrain(PretrainConfig()))
    assert ours == {
        "train_micro_batch_size_per_gpu": 8, "gradient_accumulation_steps": 1, "gradient_clipping": 1.0,
        "zero_optimization": {"stage": 2, "overlap_comm": False, "contiguous_gradients": True},
        "zero_allow_untested_optimizer": True, "bf16": {"enabled": False}, "fp16": {"enabled": False},
        "steps_per_print": 10**9, "wall_clock_breakdown": False}


FINETUNE_SECTIONS = [
    dict(lr=2e-5, micro_batch_size=16),
    dict(lr=5e-5, micro_batch_size=4, gradient_accumulation_steps=3, zero_stage=2, grad_clip=0.0,
         precision="bf16", weight_decay=0.0, adam_betas=(0.85, 0.98), warmup_fraction=0.25),
]


@pytest.mark.parametrize("section", FINETUNE_SECTIONS, ids=["defaults", "zero2-bf16"])
def test_fine_tuning_settings_give_the_engine_the_worker_built_by_hand(section):
    cfg, total_steps = FinetuneConfig(**section), 37
    settings = EngineSettings.for_finetuning(cfg, total_steps)
    ours, _ = deepspeed_config_for(settings)
    assert json.dumps(ours) == json.dumps(build_deepspeed_config(
        micro_batch_size=cfg.micro_batch_size, gradient_accumulation_steps=cfg.gradient_accumulation_steps,
        zero_stage=cfg.zero_stage, gradient_clipping=cfg.grad_clip, precision=cfg.precision))
    assert settings.schedule() == WarmupDecaySchedule(warmup_steps=round(cfg.warmup_fraction * total_steps),
                                                      max_steps=total_steps, decay="linear", min_lr_ratio=0.0)
    # initialize_engine's default implementation, which the worker's call left in place
    assert (settings.lr, settings.weight_decay, settings.adam_betas, settings.optimizer_impl) == (
        cfg.lr, cfg.weight_decay, tuple(cfg.adam_betas), "auto")


def test_fine_tuning_needs_the_task_defaults_resolved():
    with pytest.raises(ValueError, match="finetune.lr is unset: resolve the task's defaults"):
        EngineSettings.for_finetuning(FinetuneConfig(micro_batch_size=8), 10)
    with pytest.raises(ValueError, match="finetune.micro_batch_size is unset"):
        EngineSettings.for_finetuning(FinetuneConfig(lr=1e-5), 10)


# create_engine(EngineSettings) against the calls it replaced, on real single-process
# DeepSpeed engines in a subprocess (torch.distributed would leak into other tests):
# fine-tuning's initialize_engine(build_deepspeed_config(...), ...) and pretraining's
# create_engine(section). Same losses, lrs, gradient norms and weights, exactly.
ENGINE_SCRIPT = r"""
import json, torch
import torch.distributed as dist
from stages.finetune.config import FinetuneConfig
from stages.models import GPT, GPTConfig
from stages.pretrain.config import PretrainConfig
from stages.training.deepspeed_config import build_deepspeed_config
from stages.training.engine import create_engine, full_fp32_state_dict, initialize_engine, optimizer_step
from stages.training.engine_settings import EngineSettings, LossScaling
from stages.training.schedule import WarmupDecaySchedule
from tests.support.pretraining_loss import causal_lm_loss

dist.init_process_group("gloo", rank=0, world_size=1)
config = GPTConfig(vocab_size=64, max_seq_len=16, num_layers=1, hidden_size=32, num_heads=4, dropout=0.1)
ids = torch.randint(0, 64, (4, 16), generator=torch.Generator().manual_seed(0))
TOTAL_STEPS = 4

def train(build):
    torch.manual_seed(0)
    engine = build(GPT(config))
    record = {"losses": [], "lrs": [], "norms": []}
    for micro in range(TOTAL_STEPS * engine.gradient_accumulation_steps()):
        torch.manual_seed(100 + micro)
        record["lrs"].append(engine.get_lr()[0])
        loss = causal_lm_loss(engine(ids[:2]), ids[:2])
        engine.backward(loss)
        record["norms"].append(optimizer_step(engine))
        record["losses"].append(loss.item())
    record["weights"] = {n: t.double().sum().item() for n, t in full_fp32_state_dict(engine).items()}
    return record

finetune = FinetuneConfig(lr=1e-2, micro_batch_size=2, gradient_accumulation_steps=2, zero_stage=1, warmup_fraction=0.3)
def finetune_by_hand(model):  # stages/finetune/worker.py before EngineSettings
    cfg, total_steps = finetune, TOTAL_STEPS
    return initialize_engine(
        model,
        ds_config=build_deepspeed_config(
            micro_batch_size=cfg.micro_batch_size,
            gradient_accumulation_steps=cfg.gradient_accumulation_steps,
            zero_stage=cfg.zero_stage, gradient_clipping=cfg.grad_clip, precision=cfg.precision),
        lr=cfg.lr, weight_decay=cfg.weight_decay, betas=tuple(cfg.adam_betas),
        schedule=WarmupDecaySchedule(warmup_steps=round(cfg.warmup_fraction * total_steps),
                                     max_steps=total_steps, decay="linear", min_lr_ratio=0.0))

pretrain = PretrainConfig(micro_batch_size=2, zero_stage=2, precision="bf16", lr=1e-2, warmup_steps=1,
                          max_steps=TOTAL_STEPS, optimizer_impl="foreach", gradient_clipping=0.5)
def pretrain_before(model):  # create_engine(model, cfg) before EngineSettings
    cfg = pretrain
    return initialize_engine(
        model,
        ds_config=build_deepspeed_config(
            micro_batch_size=cfg.micro_batch_size, gradient_accumulation_steps=cfg.gradient_accumulation_steps,
            zero_stage=cfg.zero_stage, gradient_clipping=cfg.gradient_clipping, precision=cfg.precision,
            offload_optimizer=cfg.offload_optimizer, offload_param=cfg.offload_param,
            loss_scaling=LossScaling(**cfg.loss_scaling.model_dump())),
        lr=cfg.lr, weight_decay=cfg.weight_decay, betas=tuple(cfg.adam_betas), optimizer_impl=cfg.optimizer_impl,
        schedule=WarmupDecaySchedule(warmup_steps=cfg.warmup_steps, max_steps=cfg.max_steps,
                                     decay=cfg.lr_decay, min_lr_ratio=cfg.min_lr_ratio))

results = {
    "finetune_by_hand": train(finetune_by_hand),
    "finetune_settings": train(lambda m: create_engine(m, EngineSettings.for_finetuning(finetune, TOTAL_STEPS))),
    "pretrain_before": train(pretrain_before),
    "pretrain_settings": train(lambda m: create_engine(m, EngineSettings.from_pretrain(pretrain))),
}
print("RESULTS" + json.dumps(results))
"""


def test_create_engine_trains_exactly_as_the_calls_it_replaced():
    results = run_engine_script(ENGINE_SCRIPT)
    assert results["finetune_settings"] == results["finetune_by_hand"]
    assert results["pretrain_settings"] == results["pretrain_before"]
    finetune, pretrain = results["finetune_settings"], results["pretrain_settings"]
    assert finetune["losses"][-1] < finetune["losses"][0] and pretrain["losses"][-1] < pretrain["losses"][0]
    # A gradient norm at every accumulation boundary: fine-tuning can log it now.
    assert [norm is not None for norm in finetune["norms"]] == [False, True] * 4
    assert all(norm is not None for norm in pretrain["norms"])
