"""Resume the pretrain stage on a different number of workers (2 -> 1, then 1 -> 2), on
real Ray Train + DeepSpeed ZeRO-2 (CPU), through the stage's own entry point.

One output directory is run three times: 2 workers up to step 6, 1 worker up to 9, 2
workers up to 12, each run ending with a checkpoint the next one resumes from. The
checkpoint's ZeRO shards are per rank, so restore_latest converts it into DeepSpeed's
universal checkpoint and loads that. Checked at each switch: the first resumed step's
loss is exactly what the previous run's final weights give on the next rows of the
global data order (weights and data position restored). Over the whole run: every
step's lr is the schedule's (step counter and scheduler restored; the inverse_sqrt
schedule does not depend on max_steps), and training keeps learning.
"""

from __future__ import annotations

import math
import shutil
import time

import pytest
import torch

from stages.data.loader import ExampleLoader
from stages.models import load_pretrained
from stages.objectives.registry import build_batch_builder
from stages.pretrain.run import run
from stages.training.schedule import WarmupDecaySchedule
from tests.support.counting_dataset import TINY_GPT, VOCAB_SIZE, logged_records, pretrain_context, write_stage_inputs
from tests.support.pretraining_loss import causal_lm_loss

pytestmark = pytest.mark.ray

LR, WARMUP, MICRO_BATCH = 3e-2, 3, 4
SEGMENTS = [(2, 6), (1, 9), (2, 12)]  # (num_workers, run until step)
CONFIG = dict(
    model=TINY_GPT, zero_stage=2, precision="fp32", micro_batch_size=MICRO_BATCH, lr=LR,
    lr_decay="inverse_sqrt", warmup_steps=WARMUP, log_every=1, eval_every=100, eval_batches=2,
    checkpoint_every=100, max_failures=0,
)


@pytest.fixture(scope="module")
def stage_inputs(tmp_path_factory):
    return write_stage_inputs(tmp_path_factory.mktemp("resume-workers-inputs"))


def test_resume_on_another_number_of_workers_continues_the_run(ray_session, stage_inputs, tmp_path):
    output_dir = tmp_path / "pretrain"
    samples_consumed, previous = 0, None
    for num_workers, until in SEGMENTS:
        started = time.time()
        metrics = run(pretrain_context(output_dir, stage_inputs, num_workers=num_workers, max_steps=until, **CONFIG))
        print(f"{num_workers} worker(s) up to step {until}: {time.time() - started:.1f}s")
        assert metrics["steps"] == until
        losses = {r["step"]: r["loss"] for r in logged_records(output_dir)}
        if previous is not None:
            stopped_at, weights_at_stop = previous
            assert metrics["resumed_from_step"] == stopped_at
            assert losses[stopped_at + 1] == pytest.approx(
                loss_on_next_rows(weights_at_stop, stage_inputs, samples_consumed, num_workers), rel=1e-4)
        # The last checkpoint is written by this run's workers.
        last = output_dir / "ray" / "pretrain" / f"checkpoint-step{until:08d}"
        assert sorted(p.name for p in last.glob("extra_state_rank*")) == [
            f"extra_state_rank{rank}.json" for rank in range(num_workers)]
        samples_consumed += (until - (previous[0] if previous else 0)) * num_workers * MICRO_BATCH
        previous = (until, tmp_path / f"model-at-{until}")
        shutil.copytree(output_dir / "model", previous[1])  # the next run replaces model/

    records = logged_records(output_dir)
    max_steps = SEGMENTS[-1][1]
    assert [r["step"] for r in records] == list(range(1, max_steps + 1))
    schedule = WarmupDecaySchedule(warmup_steps=WARMUP, max_steps=max_steps, decay="inverse_sqrt")
    assert [r["lr"] for r in records] == pytest.approx([LR * schedule(r["step"] - 1) for r in records], rel=1e-6)
    losses = {r["step"]: r["loss"] for r in records}
    print({step: round(loss, 3) for step, loss in losses.items()})
    assert losses[1] == pytest.approx(math.log(VOCAB_SIZE), rel=0.1)
    assert losses[max_steps] < losses[1] - 0.3  # still learning after both switches


def loss_on_next_rows(model_dir, stage_inputs, samples_consumed: int, num_workers: int) -> float:
    """The loss of the weights in `model_dir` on the rows the resumed run's first step
    takes: the loader position is global (samples consumed by all ranks together), so
    those are the next num_workers x MICRO_BATCH rows of epoch 0's permutation."""
    loader = ExampleLoader(stage_inputs["dataset"], "train", batch_size=num_workers * MICRO_BATCH, seed=0,
                           shuffle=True, batch_builder=build_batch_builder)
    loader.load_state_dict({"epoch": 0, "samples_consumed": samples_consumed, "seed": 0})
    rows = next(loader)["input_ids"]
    with torch.no_grad():
        loss = causal_lm_loss(load_pretrained(model_dir).eval()(rows), rows)
    return loss.item()
