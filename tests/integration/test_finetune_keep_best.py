"""finetune.keep_best on a real Ray Train + DeepSpeed run (2 CPU workers, gloo): the dev
and test predictions and the saved model come from the best dev epoch, not the last."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from stages.finetune.best_checkpoint import BEST_DIR, RECORD_NAME, WEIGHTS_NAME
from stages.finetune.run import run
from stages.finetune.saved_model import HEAD_WEIGHTS_NAME
# The tiny GPT pretrained on SST-2 sentences and the stage context of the stage's own tests.
from tests.integration.test_finetune_stage import make_context, pretrain_dir  # noqa: F401

pytestmark = pytest.mark.ray


def test_keep_best_scores_and_saves_the_best_dev_epoch(ray_session, tmp_path, pretrain_dir, data_dir):  # noqa: F811
    # STS-B's Pearson moves with every epoch; at this high rate on 64 rows the seeded run
    # is best after its first epoch, so keep_best has to load earlier weights back.
    ctx = make_context(tmp_path, pretrain_dir, data_dir, tasks=["stsb"], max_train_examples=64,
                       max_eval_examples=64, epochs=3, lr=5e-3, keep_best=True)
    metrics = run(ctx)
    per_epoch = [r["dev_pearson"] for r in ctx.metrics_log.read() if r.get("task") == "stsb" and "dev_pearson" in r]
    assert len(per_epoch) == 3
    best_epoch = per_epoch.index(max(per_epoch))  # the first of equal scores
    assert per_epoch[best_epoch] > per_epoch[-1], f"the last epoch is the best {per_epoch}: this test " \
        "needs a setting where it is not (raise lr)"
    assert metrics["stsb/pearson"] == max(per_epoch) and metrics["stsb/best_epoch"] == best_epoch
    chosen = [r for r in ctx.metrics_log.read() if r.get("task") == "stsb" and "best_epoch" in r]
    assert [(r["best_epoch"], r["best_dev_pearson"]) for r in chosen] == [(best_epoch, max(per_epoch))]

    task_dir = tmp_path / "stsb"
    record = json.loads((task_dir / BEST_DIR / RECORD_NAME).read_text())
    assert record == {"epoch": best_epoch, "metric": "pearson", "score": max(per_epoch)}
    best = load_file(str(task_dir / BEST_DIR / WEIGHTS_NAME))
    head = load_file(str(task_dir / "model" / HEAD_WEIGHTS_NAME))  # the exported model's head
    assert head and all(torch.equal(tensor, best[name]) for name, tensor in head.items())
