"""finetune.average_last: predict and save with the average of the last N weight snapshots.

Vaswani et al. 2017 (sec. 6.1): "For the base models, we used a single model obtained by
averaging the last 5 checkpoints, which were written at 10-minute intervals." Here a
snapshot is taken every finetune.average_every optimizer steps (and at the last step),
or at the end of every epoch; rank 0 keeps the last N on disk, so a resumed run averages
the same snapshots as an uninterrupted one.

    snapshots = WeightSnapshots(task_dir / "average", keep=5)
    snapshots.save(state_dict, step)      # rank 0; the oldest beyond `keep` is deleted
    averaged = snapshots.average()        # {name: mean tensor} over the kept snapshots
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import torch

AVERAGE_DIR = "average"


class WeightSnapshots:
    def __init__(self, directory: str | Path, keep: int):
        self.directory, self.keep = Path(directory), keep

    def paths(self) -> list[Path]:
        return sorted(self.directory.glob("step-*.safetensors"))

    def forget(self) -> None:
        """A fresh run starts with none (an older run's snapshots are other weights)."""
        shutil.rmtree(self.directory, ignore_errors=True)

    def save(self, state_dict: dict[str, torch.Tensor], step: int) -> None:
        from safetensors.torch import save_file

        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.directory / f"step-{step:09d}.safetensors"
        temp = path.with_name(f".{path.name}.tmp")
        # Tied weights share storage, which safetensors refuses: each gets its own copy.
        save_file({name: t.detach().float().contiguous().clone() for name, t in state_dict.items()}, str(temp))
        os.replace(temp, path)  # never a half-written snapshot
        for old in self.paths()[:-self.keep]:
            old.unlink()

    def average(self) -> dict[str, torch.Tensor]:
        """The element-wise mean of the kept snapshots (at most `keep`, fewer when the run
        took fewer)."""
        from safetensors.torch import load_file

        paths = self.paths()
        if not paths:
            raise RuntimeError(f"{self.directory}: no weight snapshots to average (finetune.average_last)")
        total = None
        for path in paths:
            state = load_file(str(path))
            total = state if total is None else {name: total[name] + state[name] for name in total}
        return {name: tensor / len(paths) for name, tensor in total.items()}


def snapshot_due(step: int, total_steps: int, every: int | None, epoch_end: bool) -> bool:
    """Whether to snapshot after optimizer step `step` (at an accumulation boundary) or at
    an epoch's end (`epoch_end`)."""
    if every is None:
        return epoch_end
    return not epoch_end and (step % every == 0 or step == total_steps)
