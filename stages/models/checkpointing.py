"""Activation checkpointing, applied from outside the model (as torchtitan does): the
trainer calls it, model files stay free of it.

    apply_activation_checkpointing(model)            # every transformer block recomputes
                                                     # its activations in the backward pass
    apply_activation_checkpointing(model, every=2)   # the 2nd, 4th, ... block only

Each block's `forward` is replaced on the instance by a call through
`torch.utils.checkpoint.checkpoint` (non-reentrant), so module names, the state dict and
the outputs are unchanged; only the activations inside a block are freed after the
forward pass and recomputed (with the same dropout masks) during backward.

BLOCK_TYPES names the block class of every model the pretrain stage builds (GPT and
Llama, BERT, ALBERT and both networks of ELECTRA, T5 and the original Transformer);
stages/training/parallelize.py compiles the same blocks. A model whose blocks are missing
here would silently train without either.
"""

from __future__ import annotations

from collections.abc import Callable

import torch.nn as nn
from torch.utils.checkpoint import checkpoint

from stages.models.bert.model import BertBlock
from stages.models.gpt.model import Block
from stages.models.t5.model import T5DecoderBlock, T5EncoderBlock
from stages.models.t5.transformer import TransformerDecoderBlock, TransformerEncoderBlock

BLOCK_TYPES: tuple[type[nn.Module], ...] = (Block, BertBlock, T5EncoderBlock, T5DecoderBlock,
                                            TransformerEncoderBlock, TransformerDecoderBlock)


def apply_activation_checkpointing(model: nn.Module,
                                   block_types: tuple[type[nn.Module], ...] = BLOCK_TYPES,
                                   every: int = 1) -> int:
    """Checkpoint every `every`-th submodule of `block_types` (the n-th, 2n-th, ... in
    module order, as torchtitan's `ac_freq`; every=1: all of them); returns how many were
    wrapped. Checkpointing some blocks trades memory for recompute in between: the blocks
    left alone keep their activations and cost no second forward pass.
    Applying it twice with the same `every` is a no-op. Not for decoding with a KV cache
    (the recompute would append to the cache twice); training only."""
    if every < 1:
        raise ValueError(f"every must be >= 1 (1 = every block), got {every}")
    blocks = [module for module in model.modules() if isinstance(module, block_types)]
    wrapped = 0
    for position, module in enumerate(blocks, start=1):
        if position % every == 0 and not getattr(module, "is_checkpointed", False):
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
