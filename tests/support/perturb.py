"""Weights moved off their initialisation, for parity tests: at init many tensors are
zeros or ones (biases, norm gains), so a conversion that swapped or dropped them would
still give equal outputs."""

from __future__ import annotations

import torch


def perturb_(model: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    """Add N(0, 0.05) noise to every parameter in place (norm gains off 1); returns the
    model in eval mode."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=generator))
    return model.eval()
