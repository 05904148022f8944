"""Activation checkpointing, applied from outside the model (as torchtitan does): the
trainer calls it, model files stay free of it.

    apply_activation_checkpointing(model)   # every transformer block recomputes its
                                            # activations in the backward pass

Each block's `forward` is replaced on the instance by a call through
`torch.utils.checkpoint.checkpoint` (non-reentrant), so module names, the state dict and
the outputs are unchanged; only the activations inside a block are freed after the
forward pass and recomputed (with the same dropout masks) during backward.
"""

from __future__ import annotations

from collections.abc import Callable

import torch.nn as nn
from torch.utils.checkpoint import checkpoint

from stages.models.bert import BertBlock
from stages.models.gpt import Block
from stages.models.t5 import T5DecoderBlock, T5EncoderBlock

BLOCK_TYPES: tuple[type[nn.Module], ...] = (Block, BertBlock, T5EncoderBlock, T5DecoderBlock)


def apply_activation_checkpointing(model: nn.Module,
                                   block_types: tuple[type[nn.Module], ...] = BLOCK_TYPES) -> int:
    """Checkpoint every submodule of `block_types`; returns how many were wrapped.
    Applying it twice is a no-op. Not for decoding with a KV cache (the recompute would
    append to the cache twice); training only."""
    wrapped = 0
    for module in model.modules():
        if isinstance(module, block_types) and not getattr(module, "is_checkpointed", False):
            module.forward = checkpointed(module.forward)
            module.is_checkpointed = True
            wrapped += 1
    return wrapped


def checkpointed(forward: Callable) -> Callable:
    """`forward` through non-reentrant checkpoint. A plain function rather than a
    functools.partial: torch.compile traces into it (Dynamo skips frames that start in
    torch.utils.checkpoint) and turns the checkpoint into a recompute region of the graph."""

    def run_checkpointed(*args, **kwargs):
        return checkpoint(forward, *args, use_reentrant=False, **kwargs)

    return run_checkpointed
