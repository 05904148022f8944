"""DeepSpeed config and optimizer parameter groups from our own settings.

    ds_config = build_deepspeed_config(micro_batch_size=8, zero_stage=2)
    optimizer = torch.optim.AdamW(build_param_groups(model, weight_decay=0.1), lr=1e-3)
    engine, optimizer, _, scheduler = deepspeed.initialize(
        model=model, optimizer=optimizer, lr_scheduler=scheduler, config=ds_config)

We hand DeepSpeed a torch optimizer (a "client optimizer") instead of naming one in the
config: DeepSpeed's own Adam on CPU is a C++ extension that would be JIT-compiled on
every fresh machine. ZeRO refuses client optimizers it has not tested unless
`zero_allow_untested_optimizer` is set; AdamW is a plain torch optimizer and works.

The global batch is micro_batch_size x gradient_accumulation_steps x world size;
DeepSpeed derives it from the first two and the process group, so the same config serves
any number of workers. This module does not import DeepSpeed (the config is a dict).
"""

from __future__ import annotations

from typing import Any

import torch.nn as nn

PRECISIONS = ("fp32", "bf16")


def build_deepspeed_config(
    *,
    micro_batch_size: int,
    gradient_accumulation_steps: int = 1,
    zero_stage: int = 0,
    gradient_clipping: float = 1.0,
    precision: str = "fp32",
) -> dict[str, Any]:
    """A DeepSpeed config dict. zero_stage 0 = plain data parallel, 1 = shard optimizer
    state, 2 = also gradients, 3 = also parameters. gradient_clipping 0 disables it."""
    if zero_stage not in (0, 1, 2, 3):
        raise ValueError(f"zero_stage must be 0, 1, 2 or 3, got {zero_stage}")
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    if micro_batch_size < 1 or gradient_accumulation_steps < 1:
        raise ValueError(
            "micro_batch_size and gradient_accumulation_steps must be >= 1, got "
            f"{micro_batch_size} and {gradient_accumulation_steps}"
        )
    config: dict[str, Any] = {
        "train_micro_batch_size_per_gpu": micro_batch_size,  # "per gpu" = per worker
        "gradient_accumulation_steps": gradient_accumulation_steps,
        "gradient_clipping": gradient_clipping,
        "zero_optimization": _zero_section(zero_stage),
        "zero_allow_untested_optimizer": True,
        "bf16": {"enabled": precision == "bf16"},
        "fp16": {"enabled": False},  # fp16 needs loss scaling and a GPU; bf16 does not
        # We log our own metrics; DeepSpeed's periodic prints would interleave with them.
        "steps_per_print": 10**9,
        "wall_clock_breakdown": False,
    }
    return config


def _zero_section(zero_stage: int) -> dict[str, Any]:
    section: dict[str, Any] = {"stage": zero_stage}
    if zero_stage in (1, 2):
        # Overlapping communication with the backward pass needs CUDA streams; on CPU it
        # only adds copies. Contiguous gradients avoid fragmentation at no cost.
        section.update(overlap_comm=False, contiguous_gradients=True)
    if zero_stage == 3:
        # Gather the sharded weights into one full state dict when the trainer saves the
        # final model; without it, rank 0 would only hold its own shard.
        section.update(overlap_comm=False, stage3_gather_16bit_weights_on_model_save=True)
    return section


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
