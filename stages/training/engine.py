"""Wrap a plain PyTorch model into a DeepSpeed engine, and get full weights back out.

    settings = EngineSettings.from_pretrain(cfg)        # or .for_finetuning(cfg, total_steps)
    engine = create_engine(model, settings, user_deepspeed_config=None)
    engine = initialize_engine(model, ds_config=build_deepspeed_config(...), lr=1e-3,
                               weight_decay=0.1, schedule=WarmupDecaySchedule(...))   # by hand
    loss = objective(engine, batch).loss          # stages/objectives/: the loss of a batch
    engine.backward(loss)
    grad_norm = optimizer_step(engine)          # float at accumulation boundaries, else None
    state_dict = full_fp32_state_dict(engine)   # collective; every rank gets all weights

Pretraining and fine-tuning both build their engine with create_engine, from the
EngineSettings their config section fills (stages/training/engine_settings.py).
The model stays unaware of DeepSpeed (torchtitan's "wrap from outside"). Call inside a
Ray Train worker: the process group (gloo on CPU) already exists and DeepSpeed reuses it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import torch
import torch.nn as nn

from stages.training.deepspeed_config import build_param_groups, deepspeed_config_for
from stages.training.engine_settings import EngineSettings

logger = logging.getLogger(__name__)


def create_engine(model: nn.Module, settings: EngineSettings, *,
                  user_deepspeed_config: dict[str, Any] | None = None):
    """The engine `settings` describe: DeepSpeed config from them (see
    deepspeed_config_for) with `user_deepspeed_config` merged over it, AdamW(lr,
    weight_decay, adam_betas; implementation optimizer_impl) and settings.schedule()
    (warmup_steps, max_steps, lr_decay, min_lr_ratio). Rank 0 logs every value of ours
    the user's config replaced."""
    import torch.distributed as dist

    ds_config, overrides = deepspeed_config_for(settings, user_deepspeed_config)
    if overrides and (not dist.is_initialized() or dist.get_rank() == 0):
        logger.warning("pretrain.deepspeed_config overrides %d generated value(s): %s",
                       len(overrides), "; ".join(str(o) for o in overrides))
    if ds_config.get("fp16", {}).get("enabled"):
        check_fp16_supported()
    return initialize_engine(
        model,
        ds_config=ds_config,
        lr=settings.lr,
        weight_decay=settings.weight_decay,
        betas=tuple(settings.adam_betas),
        optimizer_impl=settings.optimizer_impl,
        schedule=settings.schedule(),
    )


def check_fp16_supported() -> None:
    """A clear error where DeepSpeed would fail deep inside initialize ("Type fp16 is not
    supported on your device"): its CPU accelerator has no fp16 training."""
    from deepspeed.accelerator import get_accelerator

    accelerator = get_accelerator()
    if not accelerator.is_fp16_supported():
        raise RuntimeError(
            f"fp16 training needs a GPU: DeepSpeed's {accelerator.device_name()!r} accelerator "
            "does not support fp16 here. Use precision bf16 (or fp32) on CPUs, or train on GPUs "
            "(gpus_per_worker: 1); if fp16 came from pretrain.deepspeed_config, remove its "
            '"fp16" section.')


def initialize_engine(
    model: nn.Module,
    *,
    ds_config: dict[str, Any],
    lr: float,
    weight_decay: float,
    schedule: Callable[[int], float],
    betas: tuple[float, float] = (0.9, 0.95),
    optimizer_impl: str = "auto",
):
    """DeepSpeed engine over `model` with torch AdamW (its fused, foreach or for-loop
    implementation: adamw_implementation) and a LambdaLR(`schedule`).

    engine.step() applies the optimizer and advances the schedule once per global batch
    (after gradient_accumulation_steps micro batches); engine.get_lr() is the current lr.
    """
    import deepspeed

    from stages.training.native_ops import ensure_native_ops

    # On CPU, build or load DeepSpeed's shm op ourselves first: its own build would wait
    # forever, silently, on a lock file left by a killed build.
    ensure_native_ops()
    # DeepSpeed logs every config key and each checkpoint file at INFO on every rank.
    deepspeed.utils.logger.setLevel(logging.WARNING)
    optimizer = torch.optim.AdamW(build_param_groups(model, weight_decay), lr=lr, betas=betas,
                                  **adamw_implementation(optimizer_impl, optimizer_device_type(ds_config)))
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)
    engine, _, _, _ = deepspeed.initialize(
        model=model, optimizer=optimizer, lr_scheduler=scheduler, config=ds_config
    )
    return engine


ADAMW_IMPLEMENTATIONS = ("auto", "fused", "foreach", "for_loop")


def adamw_implementation(impl: str, device_type: str) -> dict[str, bool]:
    """torch.optim.AdamW's keyword for `impl` on `device_type` ("cuda", "cpu", ...).

    auto = fused where torch has a fused AdamW kernel for the device (CUDA, and CPU since
    torch 2.4: one kernel per parameter instead of a dozen ops; measured 5x faster than
    foreach on CPU for GPT-2 small's 124M parameters), else foreach (one op over all
    parameters per update term). The three give the same update up to float rounding."""
    if impl not in ADAMW_IMPLEMENTATIONS:
        raise ValueError(f"optimizer_impl must be one of {ADAMW_IMPLEMENTATIONS}, got {impl!r}")
    fused_devices = fused_adamw_devices()
    if impl == "auto":
        impl = "fused" if device_type in fused_devices else "foreach"
    if impl == "fused":
        if device_type not in fused_devices:
            raise ValueError(
                f"pretrain.optimizer_impl fused: torch {torch.__version__} has no fused AdamW for "
                f"{device_type!r} (it has one for {sorted(fused_devices)}); use auto or foreach")
        return {"fused": True}
    return {"foreach": impl == "foreach"}


def fused_adamw_devices() -> set[str]:
    try:  # private, but the list torch itself checks fused=True against
        from torch.optim.optimizer import _get_fused_kernels_supported_devices
    except ImportError:
        return {"cuda"}
    return set(_get_fused_kernels_supported_devices())


def optimizer_device_type(ds_config: dict[str, Any]) -> str:
    """Where the optimizer's tensors live: the accelerator's device, or the CPU under
    ZeRO-Offload."""
    offload = ds_config.get("zero_optimization", {}).get("offload_optimizer", {})
    if offload.get("device") == "cpu":
        return "cpu"
    from deepspeed.accelerator import get_accelerator

    return get_accelerator().device_name()


def optimizer_step(engine) -> float | None:
    """`engine.step()` after a micro batch's backward. Returns the global gradient norm
    (before clipping) when this micro batch closed an accumulation window and the
    optimizer stepped, else None.

    DeepSpeed keeps that norm only under ZeRO or bf16 (it computes it while clipping);
    for plain fp32 data parallel (ZeRO-0) we take it ourselves before the step, when the
    gradients are already averaged across ranks and identical everywhere.
    """
    at_boundary = engine.is_gradient_accumulation_boundary()
    norm = None
    if at_boundary and not (engine.zero_optimization() or engine.bfloat16_enabled()):
        grads = [p.grad for p in engine.module.parameters() if p.grad is not None]
        norm = torch.nn.utils.get_total_norm(grads) if grads else None
    engine.step()
    if at_boundary and norm is None:
        norm = engine.get_global_grad_norm()
    if norm is None:
        return None
    return float(norm.item() if torch.is_tensor(norm) else norm)


def full_fp32_state_dict(engine) -> dict[str, torch.Tensor]:
    """The module's complete state dict in fp32 on CPU, on every rank (collective).

    With ZeRO (any stage) or bf16 the true weights are the optimizer's fp32 master copy,
    sharded across ranks; `safe_get_full_fp32_param` all-reduces each one back together.
    Without either (ZeRO-0, fp32) the module's own parameters are the weights. Tied
    parameters appear under each of their names, so the result loads with strict=True.
    """
    from deepspeed.utils import safe_get_full_fp32_param

    full: dict[str, torch.Tensor] = {}
    gathered: dict[int, torch.Tensor] = {}  # id(param) -> tensor, so tied ones gather once
    for name, tensor in engine.module.state_dict(keep_vars=True).items():
        if isinstance(tensor, nn.Parameter):
            if id(tensor) not in gathered:
                value = safe_get_full_fp32_param(tensor)
                gathered[id(tensor)] = (tensor.detach() if value is None else value).float().cpu().clone()
            full[name] = gathered[id(tensor)]
        else:  # buffer: not sharded by ZeRO
            full[name] = tensor.detach().cpu().clone()
    return full
