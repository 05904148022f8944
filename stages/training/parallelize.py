"""Wrap a plain model from outside before it goes into the engine (torchtitan's
`parallelize_*` step): activation checkpointing, then compilation, per transformer block.

    parallelize(model, activation_checkpointing=True, compile=True)
    engine = initialize_engine(model, ds_config=..., ...)

or from the pretrain section (pretrain.activation_checkpointing, .compile; what the
training loop does before create_engine):

    parallelize_for(model, cfg)

or the parts on their own:

    apply_activation_checkpointing(model)      # stages.models.checkpointing
    apply_compile(model, backend="inductor")   # torch.compile of every block

Model files never see either. Compiling per block (not the whole model) keeps graphs
small, lets every identical block reuse one compiled graph, and leaves the embedding,
loss and the engine's hooks in eager mode. `nn.Module.compile()` compiles the block in
place, so module names and the state dict are unchanged (no `_orig_mod.` prefixes) and
checkpoints stay interchangeable between compiled and eager runs.
"""

from __future__ import annotations

from typing import Any

import torch.nn as nn

from stages.models.checkpointing import BLOCK_TYPES, apply_activation_checkpointing


def apply_compile(model: nn.Module, block_types: tuple[type[nn.Module], ...] = BLOCK_TYPES,
                  **compile_kwargs: Any) -> int:
    """`torch.compile` every submodule of `block_types` in place; returns how many were
    compiled. compile_kwargs go to torch.compile (e.g. backend="aot_eager" where inductor
    has no C++ compiler). Applying it twice is a no-op. Compilation itself happens on the
    first forward pass of each block."""
    compiled = 0
    for module in model.modules():
        if isinstance(module, block_types) and not getattr(module, "is_compiled", False):
            module.compile(**compile_kwargs)
            module.is_compiled = True
            compiled += 1
    return compiled


def parallelize(model: nn.Module, *, activation_checkpointing: bool = False, checkpoint_every: int = 1,
                compile: bool = False, compile_kwargs: dict[str, Any] | None = None) -> nn.Module:
    """Apply the requested wrappers in torchtitan's order (checkpointing inside the
    compiled block, so the compiler sees the recompute); returns the same model.
    checkpoint_every: checkpoint every n-th block only (1 = all)."""
    if activation_checkpointing:
        apply_activation_checkpointing(model, every=checkpoint_every)
    if compile:
        apply_compile(model, **(compile_kwargs or {}))
    return model


def parallelize_for(model: nn.Module, cfg: Any) -> nn.Module:
    """parallelize() as a pretrain section asks: cfg.activation_checkpointing (none | full
    | every_n with cfg.activation_checkpointing_every), cfg.compile with
    cfg.compile_backend."""
    mode = cfg.activation_checkpointing
    return parallelize(
        model,
        activation_checkpointing=mode != "none",
        checkpoint_every=cfg.activation_checkpointing_every if mode == "every_n" else 1,
        compile=cfg.compile,
        compile_kwargs={"backend": cfg.compile_backend},
    )
