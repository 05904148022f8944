"""Reading safetensors files with errors that name the file.

safetensors' own errors ("Error while deserializing header: invalid header length") do
not say which file; a truncated or overwritten weights file then fails a stage far from
where the file was written. These wrappers re-raise them as DamagedWeightsError naming
the path and how to rebuild it. They catch what does not parse: flipped bytes inside the
tensor data still load (the engine's sha256 check of a stage's outputs catches those).
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn as nn
from safetensors import SafetensorError
from safetensors.torch import load_file, load_model

REBUILD_HINT = ("rebuild the stage that wrote it (`pretrain run CONFIG --force STAGE`; "
                "`pretrain verify RUN_DIR` checks every finished stage's files)")


class DamagedWeightsError(ValueError):
    """A weights file that is not a readable safetensors file."""


def read_weights(path: str | Path, device: str = "cpu") -> dict[str, torch.Tensor]:
    """Every tensor of a safetensors file (safetensors.torch.load_file)."""
    try:
        return load_file(str(path), device=device)
    except (SafetensorError, OSError) as error:
        raise _damaged(path, error) from error


def load_weights_into(model: nn.Module, path: str | Path, device: str = "cpu") -> None:
    """Load a file written by safetensors.torch.save_model into `model`, strictly
    (shared tensors are re-tied)."""
    try:
        load_model(model, str(path), strict=True, device=device)
    except (SafetensorError, OSError) as error:
        raise _damaged(path, error) from error
    except RuntimeError as error:  # missing or unexpected keys, other shapes
        raise DamagedWeightsError(
            f"{path}: the weights do not fit the model its config describes ({error}); the "
            f"folder's files do not belong together: {REBUILD_HINT}") from error


def _damaged(path: str | Path, error: Exception) -> DamagedWeightsError:
    return DamagedWeightsError(
        f"{path}: not a readable safetensors file ({type(error).__name__}: {error}); it is "
        f"truncated or damaged: {REBUILD_HINT}")
