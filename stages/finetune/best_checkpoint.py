"""The best dev epoch's weights (`finetune.keep_best`): kept on disk, used for the final predictions.

    best = BestDevCheckpoint(task_dir / BEST_DIR, metric="accuracy")
    if best.consider(epoch, {"dev_accuracy": 0.83}):   # every rank decides the same
        best.save(full_fp32_state_dict(engine), epoch)   # rank 0 writes
    ...
    engine.module.load_state_dict(best.load_state_dict())

On disk, not in memory, so that a run resumed from its last epoch checkpoint still knows
the best epoch before the crash: `best.json` ({"epoch", "metric", "score"}) and
`model.safetensors`, written into a sibling folder and swapped into place, so a crash
never leaves weights that do not match the record. The task directory is on the storage
every worker reads (rank 0 writes model_outputs.npz there too).
"""

from __future__ import annotations

import json
import math
import os
import shutil
from pathlib import Path

import torch

BEST_DIR = "best_dev"
RECORD_NAME = "best.json"
WEIGHTS_NAME = "model.safetensors"


def best_epoch_facts(task_dir: Path, keep_best: bool) -> dict[str, int]:
    """{"best_epoch": n} for a task's metrics.json when keep_best chose the weights, else {}."""
    record = BestDevCheckpoint(Path(task_dir) / BEST_DIR, metric=None).record if keep_best else None
    return {} if record is None else {"best_epoch": record["epoch"]}


class BestDevCheckpoint:
    """The epoch with the highest dev score on `metric` (the task's main metric; every
    metric the finetune stage ranks by is higher-is-better). Ties keep the earlier epoch."""

    def __init__(self, directory: Path, metric: str | None):  # None: read whatever was recorded
        self.directory, self.metric = Path(directory), metric
        self.record = self._read_record()

    @property
    def best_epoch(self) -> int | None:
        return None if self.record is None else self.record["epoch"]

    def consider(self, epoch: int, dev_scores: dict[str, float]) -> bool:
        """Whether this epoch's dev scores ("dev_<metric>": value) beat the best so far."""
        key = f"dev_{self.metric}"
        if key not in dev_scores:
            raise KeyError(f"finetune.keep_best ranks epochs by {key}, but the dev scores hold only "
                           f"{sorted(dev_scores)}")
        score = float(dev_scores[key])
        if self.record is not None and not _beats(score, self.record["score"]):
            return False
        self.record = {"epoch": epoch, "metric": self.metric, "score": score}
        return True

    def save(self, state_dict: dict[str, torch.Tensor], epoch: int) -> None:
        """Write the weights of `epoch` (the one `consider` just accepted)."""
        from safetensors.torch import save_file

        assert self.record is not None and self.record["epoch"] == epoch, "save only what consider() accepted"
        staging = self.directory.with_name(self.directory.name + ".partial")
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        # Tied weights share storage; safetensors wants each tensor on its own.
        save_file({name: tensor.contiguous().clone() for name, tensor in state_dict.items()},
                  str(staging / WEIGHTS_NAME))
        (staging / RECORD_NAME).write_text(json.dumps(self.record) + "\n")
        shutil.rmtree(self.directory, ignore_errors=True)
        os.replace(staging, self.directory)

    def forget(self, *, remove: bool) -> None:
        """A run starting from scratch: an earlier attempt's best is not this run's.
        remove: delete the files too (rank 0 only; the other ranks just forget)."""
        self.record = None
        if remove:
            shutil.rmtree(self.directory, ignore_errors=True)

    def load_state_dict(self) -> dict[str, torch.Tensor]:
        from safetensors.torch import load_file

        return load_file(str(self.directory / WEIGHTS_NAME))

    def _read_record(self) -> dict | None:
        path = self.directory / RECORD_NAME
        if not path.is_file():
            return None
        record = json.loads(path.read_text())
        if self.metric is not None and record.get("metric") != self.metric:  # ranked by another metric
            return None
        return record


def _beats(score: float, best: float) -> bool:
    """A NaN score (a diverged epoch) never wins, and any real score beats a NaN best."""
    return not math.isnan(score) and (math.isnan(best) or score > best)
