"""Our own part of a training checkpoint, one pair of files per rank, stored without pickle:

    extra_state_rank<R>.json          step, world_size, the caller's extra state (the data
                                      loader position, the epoch, ...) and the RNG scalars
    rng_state_rank<R>.safetensors     the RNG state arrays: Python's and NumPy's Mersenne
                                      Twister words, torch's CPU (and CUDA) generator states

Why not torch.save: reading that back needs torch.load(weights_only=False), an unpickle,
and unpickling runs code, so a checkpoint folder from elsewhere could run anything when a
run resumes from it. JSON and safetensors hold data only. (DeepSpeed's own files in the
same checkpoint are still torch.save pickles that DeepSpeed loads: see the README, "How
caching and restarts work".)

The caller's extra state must be JSON: dicts with string keys, lists, numbers, strings
(NumPy scalars are turned into numbers; tuples come back as lists).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import torch

EXTRA_STATE_NAME = "extra_state_rank{rank}.json"
RNG_STATE_NAME = "rng_state_rank{rank}.safetensors"
# What versions before this format wrote (torch.save): refused, never unpickled.
PICKLED_EXTRA_STATE_NAME = "extra_state_rank{rank}.pt"


def extra_state_path(directory: Path, rank: int) -> Path:
    return Path(directory) / EXTRA_STATE_NAME.format(rank=rank)


def save_extra_state(directory: Path, rank: int, state: dict[str, Any]) -> None:
    """Write `state` (JSON values, plus "rng" as `capture_rng_state` returns it) as this
    rank's files in `directory`."""
    from safetensors.torch import save_file

    state = dict(state)
    rng = state.pop("rng", None)
    if rng is not None:
        scalars, arrays = _split_rng_state(rng)
        save_file(arrays, str(Path(directory) / RNG_STATE_NAME.format(rank=rank)))
        state["rng"] = scalars
    text = json.dumps(state, indent=1, default=_json_number)
    extra_state_path(directory, rank).write_text(text + "\n", encoding="utf-8")


def load_extra_state(directory: Path, rank: int, *, with_rng: bool = True) -> dict[str, Any]:
    """This rank's state as saved; with_rng=False leaves out "rng" (and does not read the
    arrays). A file that does not parse raises RuntimeError naming it."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    path = extra_state_path(directory, rank)
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise RuntimeError(f"{path}: not valid JSON ({error}): the checkpoint is damaged; "
                           f"resume from an earlier one or start the run over") from error
    scalars = state.pop("rng", None)
    if with_rng and scalars is not None:
        rng_path = Path(directory) / RNG_STATE_NAME.format(rank=rank)
        try:
            arrays = load_file(str(rng_path))
        except (OSError, SafetensorError) as error:
            raise RuntimeError(f"{rng_path}: cannot be read ({type(error).__name__}: {error}): "
                               f"the checkpoint is damaged; resume from an earlier one or start "
                               f"the run over") from error
        state["rng"] = _join_rng_state(scalars, arrays)
    return state


def _split_rng_state(rng: dict[str, Any]) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """capture_rng_state()'s dict -> (JSON scalars, named tensors)."""
    version, words, gauss_next = rng["python"]
    generator, keys, position, has_gauss, cached_gaussian = rng["numpy"]
    arrays = {"python": torch.tensor(words, dtype=torch.int64),
              "numpy": torch.from_numpy(np.asarray(keys, dtype=np.int64)),
              "torch": rng["torch"].contiguous()}
    cuda = rng.get("cuda") or []
    arrays.update({f"cuda.{i}": state.contiguous() for i, state in enumerate(cuda)})
    scalars = {"python": [version, gauss_next],
               "numpy": [generator, int(position), int(has_gauss), float(cached_gaussian)],
               "cuda_devices": len(cuda)}
    return scalars, arrays


def _join_rng_state(scalars: dict[str, Any], arrays: dict[str, torch.Tensor]) -> dict[str, Any]:
    version, gauss_next = scalars["python"]
    generator, position, has_gauss, cached_gaussian = scalars["numpy"]
    rng = {"python": (version, tuple(int(w) for w in arrays["python"].tolist()), gauss_next),
           "numpy": (generator, arrays["numpy"].numpy().astype(np.uint32), position, has_gauss,
                     cached_gaussian),
           "torch": arrays["torch"]}
    if scalars["cuda_devices"]:
        rng["cuda"] = [arrays[f"cuda.{i}"] for i in range(scalars["cuda_devices"])]
    return rng


def _json_number(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"extra checkpoint state must be JSON (dicts, lists, numbers, strings), "
                    f"got a {type(value).__name__}: {value!r}")
