"""DeepSpeed config and optimizer parameter groups from our own settings.

    ds_config = build_deepspeed_config(micro_batch_size=8, zero_stage=2)
    ds_config, overrides = deepspeed_config_for(settings, user_config)  # from EngineSettings
    optimizer = torch.optim.AdamW(build_param_groups(model, weight_decay=0.1), lr=1e-3)
    engine, optimizer, _, scheduler = deepspeed.initialize(
        model=model, optimizer=optimizer, lr_scheduler=scheduler, config=ds_config)

We hand DeepSpeed a torch optimizer (a "client optimizer") instead of naming one in the
config: DeepSpeed's own Adam on CPU is a C++ extension that would be JIT-compiled on
every fresh machine. ZeRO refuses client optimizers it has not tested unless
`zero_allow_untested_optimizer` is set; AdamW is a plain torch optimizer and works.
ZeRO-Offload also insists on its own CPU Adam unless `zero_force_ds_cpu_optimizer` is
false; with it false, torch AdamW steps the offloaded fp32 state on the CPU (verified
for ZeRO 1, 2 and 3, with and without parameter offload, on DeepSpeed 0.19.8). On a GPU
DeepSpeed's CPU Adam would step faster; it is a config merge away
(`pretrain.deepspeed_config`), not our default, because it needs a compiler.

The global batch is micro_batch_size x gradient_accumulation_steps x world size;
DeepSpeed derives it from the first two and the process group, so the same config serves
any number of workers. This module does not import DeepSpeed (the config is a dict).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import torch.nn as nn

from stages.training.deepspeed_overrides import Override, merge_deepspeed_config, read_deepspeed_json
from stages.training.engine_settings import EngineSettings, LossScaling

logger = logging.getLogger(__name__)

PRECISIONS = ("fp32", "bf16", "fp16")


def build_deepspeed_config(
    *,
    micro_batch_size: int,
    gradient_accumulation_steps: int = 1,
    zero_stage: int = 0,
    gradient_clipping: float = 1.0,
    precision: str = "fp32",
    offload_optimizer: bool = False,
    offload_param: bool = False,
    loss_scaling: LossScaling = LossScaling(),
) -> dict[str, Any]:
    """A DeepSpeed config dict. zero_stage 0 = plain data parallel, 1 = shard optimizer
    state, 2 = also gradients, 3 = also parameters. gradient_clipping 0 disables it.
    offload_optimizer keeps optimizer state and fp32 master weights in CPU memory (ZeRO
    1-3); offload_param also the parameters (ZeRO-3 only). loss_scaling applies to fp16."""
    if zero_stage not in (0, 1, 2, 3):
        raise ValueError(f"zero_stage must be 0, 1, 2 or 3, got {zero_stage}")
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    if micro_batch_size < 1 or gradient_accumulation_steps < 1:
        raise ValueError(
            "micro_batch_size and gradient_accumulation_steps must be >= 1, got "
            f"{micro_batch_size} and {gradient_accumulation_steps}"
        )
    if offload_optimizer and zero_stage == 0:
        raise ValueError("offload_optimizer needs zero_stage 1, 2 or 3 (ZeRO-Offload moves the "
                         "sharded optimizer state); got zero_stage 0")
    if offload_param and zero_stage != 3:
        raise ValueError(f"offload_param needs zero_stage 3 (only ZeRO-3 shards parameters); "
                         f"got zero_stage {zero_stage}")
    config: dict[str, Any] = {
        "train_micro_batch_size_per_gpu": micro_batch_size,  # "per gpu" = per worker
        "gradient_accumulation_steps": gradient_accumulation_steps,
        "gradient_clipping": gradient_clipping,
        "zero_optimization": _zero_section(zero_stage, offload_optimizer, offload_param),
        "zero_allow_untested_optimizer": True,
        "bf16": {"enabled": precision == "bf16"},
        "fp16": _fp16_section(precision == "fp16", loss_scaling),
        # We log our own metrics; DeepSpeed's periodic prints would interleave with them.
        "steps_per_print": 10**9,
        "wall_clock_breakdown": False,
    }
    if offload_optimizer:
        config["zero_force_ds_cpu_optimizer"] = False  # keep torch AdamW (see module doc)
    return config


def deepspeed_config_for(settings: EngineSettings, user_config: dict[str, Any] | None = None
                         ) -> tuple[dict[str, Any], list[Override]]:
    """The config for an engine's settings (micro_batch_size, zero_stage, grad_clip,
    precision, offload_*, loss_scaling) with a user's raw DeepSpeed dict merged over it,
    and the list of our values it replaced."""
    ours = build_deepspeed_config(
        micro_batch_size=settings.micro_batch_size,
        gradient_accumulation_steps=settings.gradient_accumulation_steps,
        zero_stage=settings.zero_stage,
        gradient_clipping=settings.grad_clip,
        precision=settings.precision,
        offload_optimizer=settings.offload_optimizer,
        offload_param=settings.offload_param,
        loss_scaling=settings.loss_scaling,
    )
    if not user_config:
        return ours, []
    return merge_deepspeed_config(ours, user_config)


def _zero_section(zero_stage: int, offload_optimizer: bool, offload_param: bool) -> dict[str, Any]:
    section: dict[str, Any] = {"stage": zero_stage}
    if zero_stage in (1, 2):
        # Overlapping communication with the backward pass needs CUDA streams; on CPU it
        # only adds copies. Contiguous gradients avoid fragmentation at no cost.
        section.update(overlap_comm=False, contiguous_gradients=True)
    if zero_stage == 3:
        # Gather the sharded weights into one full state dict when the trainer saves the
        # final model; without it, rank 0 would only hold its own shard.
        section.update(overlap_comm=False, stage3_gather_16bit_weights_on_model_save=True)
    # pin_memory stays off: pinning needs CUDA, and on a GPU it only speeds up copies.
    if offload_optimizer:
        section["offload_optimizer"] = {"device": "cpu"}
    if offload_param:
        section["offload_param"] = {"device": "cpu"}
    return section


def _fp16_section(enabled: bool, loss_scaling: LossScaling) -> dict[str, Any]:
    if not enabled:
        return {"enabled": False}
    return {
        "enabled": True,
        "loss_scale": 0,  # 0 = dynamic; any other value is a fixed scale
        "initial_scale_power": loss_scaling.initial_scale_power,
        "loss_scale_window": loss_scaling.loss_scale_window,
        "hysteresis": loss_scaling.hysteresis,
        "min_loss_scale": loss_scaling.min_loss_scale,
    }


def build_param_groups(model: nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    """Two AdamW groups: matrices and embeddings decay; biases and LayerNorm gains do not.

    Decaying a bias or a norm's scale only pulls activations towards zero without
    regularising any interaction between features (as in GPT-2/nanoGPT). The rule is by
    shape (>= 2 dims decays), so it also holds for heads and families added later. Tied
    parameters appear once (named_parameters deduplicates them).
    """
    decay, no_decay = [], []
    for _, param in model.named_parameters():
        if not param.requires_grad:
            continue
        (decay if param.dim() >= 2 else no_decay).append(param)
    return [
        {"params": decay, "weight_decay": weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]


def resolve_deepspeed_config(settings: EngineSettings, user_file: str | None, output_dir: Path,
                             config_key: str = "pretrain.deepspeed_config"
                             ) -> tuple[dict[str, Any] | None, list[Override]]:
    """Driver side, before any worker starts: read the user's DeepSpeed JSON `user_file`
    (the value of `config_key`; errors name the file and line), log each value of ours
    it overrides, and write output_dir/deepspeed_config.json with the config generated
    from `settings`, the user's file, the merged result (with one worker) and the
    overrides, so the run's record (the manifest lists the file) shows what DeepSpeed was
    given. Returns the user's dict (for the workers to merge again) and the overrides."""
    user_config = read_deepspeed_json(user_file, config_key) if user_file else None
    ours, _ = deepspeed_config_for(settings)
    merged, overrides = deepspeed_config_for(settings, user_config)
    for override in overrides:
        logger.warning("%s (%s) overrides %s", config_key, user_file, override)
    record = {
        "user_file": str(Path(user_file).resolve()) if user_file else None,
        "overrides": [{"key": o.key, "ours": o.ours, "theirs": o.theirs} for o in overrides],
        "generated": ours, "user": user_config, "merged": merged,
    }
    (Path(output_dir) / "deepspeed_config.json").write_text(json.dumps(record, indent=2) + "\n")
    return user_config, overrides
