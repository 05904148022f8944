"""The pretrain stage end to end on real Ray Train + DeepSpeed (2 workers, ZeRO-2, CPU):
metrics, checkpoints, exported model, samples (pretrain.samples); and resume after the
driver is SIGKILLed.

The dataset is written here in the dataset stage's format (index.json + Arrow IPC
shards) with a pattern a tiny model learns in a few dozen steps: each row counts up
from a random start by a stride of 1, 2 or 3 (mod vocab), so the next token follows
from the previous two.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from safetensors.torch import load_file

from pipeline.context import StageContext
from stages.data.loader import PackedSequenceLoader
from stages.models import load_pretrained
from stages.pretrain.config import PretrainConfig
from stages.pretrain.run import run
from stages.pretrain.sample_plan import plan_samples
from stages.pretrain.samples import SAMPLES_FILE, Sampler
from stages.pretrain.snapshots import read_snapshot_index, snapshot_path
from tests.support.counting_dataset import SEQ_LEN, VOCAB_SIZE, write_counting_dataset
from tests.support.pretraining_loss import causal_lm_loss

pytestmark = pytest.mark.ray

REPO_ROOT = Path(__file__).resolve().parents[2]
MAX_STEPS = 30
CONFIG = dict(
    model={"family": "gpt", "num_layers": 2, "hidden_size": 32, "num_heads": 4},
    num_workers=2, zero_stage=2, precision="fp32", micro_batch_size=4, lr=1e-2,
    warmup_steps=3, max_steps=MAX_STEPS, log_every=1, eval_every=10, eval_batches=4,
    checkpoint_every=10, max_failures=0,
    # Step 12 falls between the killed run's checkpoint (10) and its kill (13): the resumed
    # run must keep that snapshot rather than write it again.
    snapshot_every=4,
    # Samples at every snapshot and the end (30); the resumed run must write the killed
    # one's step 12 again, once, with the same text.
    samples={"prompts": ["3 4 5", "60 62 64"], "every": 4, "max_new_tokens": 8},
)
SNAPSHOT_STEPS = list(range(4, MAX_STEPS + 1, 4))
SAMPLE_STEPS = [*SNAPSHOT_STEPS, MAX_STEPS]


@pytest.fixture(scope="module")
def stage_inputs(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("pretrain-inputs")
    tokenizer_dir = root / "tokenizer"
    tokenizer_dir.mkdir()
    counting_tokenizer().save(str(tokenizer_dir / "tokenizer.json"))
    return {"dataset": write_counting_dataset(root / "dataset"), "tokenizer": tokenizer_dir}


def counting_tokenizer():
    """One word per token id of the counting dataset ("0" to "127"): the samples' prompts
    and text are numbers."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    tokenizer = Tokenizer(models.WordLevel({str(i): i for i in range(VOCAB_SIZE)}, unk_token="0"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return tokenizer


def sample_lines(output_dir: Path) -> list[dict]:
    """samples.jsonl without the wall-clock time of each line."""
    lines = [json.loads(line) for line in (output_dir / SAMPLES_FILE).read_text().splitlines()]
    return [{k: v for k, v in line.items() if k != "time"} for line in lines]


def make_context(output_dir: Path, stage_inputs: dict[str, Path]) -> StageContext:
    return StageContext(name="pretrain", config=PretrainConfig(**CONFIG), experiment=SimpleNamespace(seed=0),
                        output_dir=output_dir, inputs=dict(stage_inputs))


def losses_by_step(output_dir: Path) -> dict[int, float]:
    """Logged loss per step (a resume drops the records past its checkpoint first)."""
    return {r["step"]: r["loss"] for r in logged_losses(output_dir)}


def logged_losses(output_dir: Path) -> list[dict]:
    records = StageContext("pretrain", None, None, output_dir).metrics_log.read()
    return [r for r in records if "loss" in r]


@pytest.fixture(scope="module")
def uninterrupted(ray_session, stage_inputs, tmp_path_factory):
    output_dir = tmp_path_factory.mktemp("pretrain-uninterrupted")
    started = time.time()
    metrics = run(make_context(output_dir, stage_inputs))
    print(f"uninterrupted pretrain: {time.time() - started:.1f}s, {metrics}")
    return output_dir, metrics


def test_pretrain_trains_logs_checkpoints_and_exports(uninterrupted, stage_inputs):
    output_dir, metrics = uninterrupted
    assert metrics["steps"] == MAX_STEPS and metrics["resumed_from_step"] == 0
    assert set(metrics) >= {"steps", "final_loss", "val_loss", "val_perplexity", "tokens_per_second",
                            "num_parameters", "wall_seconds"}
    assert metrics["val_perplexity"] == pytest.approx(math.exp(metrics["val_loss"]))
    assert metrics["tokens_per_second"] > 0 and metrics["wall_seconds"] > 0

    records = StageContext("pretrain", None, None, output_dir).metrics_log.read()
    train_records = [r for r in records if "loss" in r]
    assert [r["step"] for r in train_records] == list(range(1, MAX_STEPS + 1))
    for record in train_records:
        assert {"time", "lr", "grad_norm", "tokens_per_s", "samples_per_s", "data_wait_s",
                "data_wait_share", "clm_loss", "clm_accuracy"} <= set(record)
        assert "mfu" not in record, "a CPU without pretrain.peak_tflops has no peak to measure MFU against"
        assert record["grad_norm"] > 0 and record["tokens_per_s"] > 0
        assert record["tokens_per_s"] == pytest.approx(record["samples_per_s"] * SEQ_LEN)
        assert record["loss"] == record["clm_loss"] and 0 <= record["clm_accuracy"] <= 1
    assert [r["step"] for r in records if "val_loss" in r] == [10, 20, 30]
    assert train_records[2]["lr"] == pytest.approx(1e-2)  # warmup ends at step 3 (index 2)
    # The pattern is learnable: far below the uniform-guess loss of log(128) = 4.85.
    assert train_records[0]["loss"] == pytest.approx(math.log(VOCAB_SIZE), rel=0.1)
    assert metrics["final_loss"] < 0.6 * train_records[0]["loss"]
    assert metrics["val_loss"] < 0.6 * math.log(VOCAB_SIZE)

    # Snapshots every 4 steps, listed with the tokens trained on before them.
    assert read_snapshot_index(output_dir) == [
        {"step": step, "tokens": step * 2 * CONFIG["micro_batch_size"] * SEQ_LEN,
         "path": f"snapshots/step-{step:07d}"} for step in SNAPSHOT_STEPS]
    for step in SNAPSHOT_STEPS:
        folder = snapshot_path(output_dir, step)
        assert sorted(p.name for p in folder.iterdir()) == ["model.safetensors", "model_config.json", "tokenizer.json"]
    assert load_pretrained(snapshot_path(output_dir, 4)).num_parameters() == metrics["num_parameters"]

    # Samples of both prompts at each sampled step; the live model's are what the step's
    # snapshot, loaded here, draws with the same generators.
    lines = sample_lines(output_dir)
    assert [(line["step"], line["prompt"]) for line in lines] == [
        (step, prompt) for step in SAMPLE_STEPS for prompt in CONFIG["samples"]["prompts"]]
    assert lines[0]["tokens_seen"] == read_snapshot_index(output_dir)[0]["tokens"]
    assert all(line["text"] for line in lines) and metrics["sampling_seconds"] > 0
    cfg = PretrainConfig(**CONFIG)
    plan = plan_samples(cfg, stage_inputs["tokenizer"] / "tokenizer.json", stage_inputs["dataset"],
                        json.loads((stage_inputs["dataset"] / "index.json").read_text()), seed=0)
    sampler = Sampler(plan, cfg.samples, stage_inputs["tokenizer"] / "tokenizer.json", torch.device("cpu"),
                      output_dir / "unused.jsonl")
    for step in (8, 24):
        offline = sampler.draw(load_pretrained(snapshot_path(output_dir, step)).eval(), step,
                               lines[0]["tokens_seen"] * step // 4)
        assert offline == [line for line in lines if line["step"] == step], step

    # Checkpoints: the last two are kept, each with both workers' ZeRO shards and state.
    run_dir = output_dir / "ray" / "pretrain"
    checkpoints = sorted(p.name for p in run_dir.glob("checkpoint-step*"))
    assert checkpoints == ["checkpoint-step00000020", "checkpoint-step00000030"]
    last = run_dir / "checkpoint-step00000030"
    assert (last / "latest").read_text() == "global_step30"
    shard_names = sorted(p.name for p in (last / "global_step30").glob("zero_pp_rank_*"))
    assert shard_names == ["zero_pp_rank_0_mp_rank_00_optim_states.pt", "zero_pp_rank_1_mp_rank_00_optim_states.pt"]
    assert sorted(p.name for p in last.glob("*_rank*.*")) == [
        "extra_state_rank0.json", "extra_state_rank1.json",
        "rng_state_rank0.safetensors", "rng_state_rank1.safetensors"]

    # The exported model scores the validation rows exactly as the last evaluation did.
    model_dir = output_dir / "model"
    assert (model_dir / "tokenizer.json").read_text() == (stage_inputs["tokenizer"] / "tokenizer.json").read_text()
    model = load_pretrained(model_dir).eval()
    assert model.num_parameters() == metrics["num_parameters"]
    validation = PackedSequenceLoader(stage_inputs["dataset"], "validation", batch_size=32, shuffle=False)
    rows = next(validation)  # the 2 workers x 4 batches x 4 rows the evaluation used
    with torch.no_grad():
        loss = causal_lm_loss(model(rows), rows)
    assert loss.item() == pytest.approx(metrics["val_loss"], rel=1e-4)


# The interrupted run's driver: a separate process on the shared Ray cluster, so that the
# test can SIGKILL it. Its metrics log blocks rank 0 for good once step FREEZE_AT is logged
# (after the checkpoint at step 10), so the kill always lands mid-run at the same point.
FREEZE_AT = 13
DRIVER_SCRIPT = r"""
import sys, time
from pathlib import Path
from types import SimpleNamespace
import ray
sys.path.insert(0, REPO_ROOT)
from pipeline.context import MetricsLog, StageContext
from stages.pretrain.config import PretrainConfig
from stages.pretrain.run import run

class FreezingMetricsLog(MetricsLog):
    def log(self, record):
        super().log(record)
        if record.get("step", 0) >= FREEZE_AT:
            time.sleep(3600)

class FreezingContext(StageContext):
    @property
    def metrics_log(self):
        return FreezingMetricsLog(self.output_dir / "metrics.jsonl")

ray.init(address=ADDRESS, log_to_driver=False)
run(FreezingContext(name="pretrain", config=PretrainConfig(**CONFIG), experiment=SimpleNamespace(seed=0),
                    output_dir=Path(OUTPUT_DIR), inputs={k: Path(v) for k, v in INPUTS.items()}))
"""


def test_resume_after_driver_sigkill_matches_the_uninterrupted_run(uninterrupted, stage_inputs, ray_session, tmp_path):
    baseline_dir, baseline_metrics = uninterrupted
    output_dir = tmp_path / "pretrain"
    script = tmp_path / "driver.py"
    script.write_text(
        f"REPO_ROOT = {str(REPO_ROOT)!r}\nADDRESS = {ray_session.get_runtime_context().gcs_address!r}\n"
        f"OUTPUT_DIR = {str(output_dir)!r}\nINPUTS = {({k: str(v) for k, v in stage_inputs.items()})!r}\n"
        f"CONFIG = {CONFIG!r}\nFREEZE_AT = {FREEZE_AT}\n" + DRIVER_SCRIPT
    )
    started = time.time()
    log_file = open(tmp_path / "driver.log", "w")
    driver = subprocess.Popen([sys.executable, str(script)], stdout=log_file, stderr=subprocess.STDOUT,
                              env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    try:
        snapshot = output_dir / "ray" / "pretrain" / "checkpoint_manager_snapshot.json"
        deadline = time.time() + 240
        while not (FREEZE_AT in losses_by_step(output_dir)
                   and snapshot.is_file() and "checkpoint-step00000010" in snapshot.read_text()):
            assert driver.poll() is None, (tmp_path / "driver.log").read_text()[-3000:]
            assert time.time() < deadline, "the interrupted run never reached its checkpoint"
            time.sleep(0.2)
    finally:
        os.kill(driver.pid, signal.SIGKILL)
        driver.wait()
        log_file.close()
    killed_at = time.time()
    assert max(losses_by_step(output_dir)) == FREEZE_AT  # frozen: it did not get further
    assert not (output_dir / "model").exists()
    assert [e["step"] for e in read_snapshot_index(output_dir)] == [4, 8, 12]
    kept_snapshot = snapshot_path(output_dir, 12) / "model.safetensors"
    kept_written_at = kept_snapshot.stat().st_mtime_ns
    first_attempt = {r["step"]: r["loss"] for r in logged_losses(output_dir)}
    assert [line["step"] for line in sample_lines(output_dir)] == [4, 4, 8, 8, 12, 12]  # 12: past the checkpoint

    metrics = run(make_context(output_dir, stage_inputs))
    print(f"interrupted run: {killed_at - started:.1f}s until killed, resumed run {time.time() - killed_at:.1f}s")

    assert metrics["resumed_from_step"] == 10 and metrics["steps"] == MAX_STEPS
    resumed = losses_by_step(output_dir)
    baseline = losses_by_step(baseline_dir)
    assert sorted(resumed) == list(range(1, MAX_STEPS + 1))
    # The resume dropped the killed attempt's records past the checkpoint (steps 11-13)
    # and logged them again: every step once, and the same losses as the first time.
    steps = [r["step"] for r in logged_losses(output_dir)]
    assert steps == list(range(1, MAX_STEPS + 1))
    assert all(first_attempt[s] == resumed[s] for s in range(11, FREEZE_AT + 1))
    # fp32, fixed seed, restored optimizer, schedule, data position and RNG, one thread per
    # worker, same machine: the resumed run is the uninterrupted one, bit for bit.
    assert [resumed[s] for s in sorted(resumed)] == [baseline[s] for s in sorted(baseline)]
    assert metrics["val_loss"] == baseline_metrics["val_loss"]
    # Snapshots: each step once, the one written before the kill kept as it was, and the
    # same weights and token counts as the uninterrupted run's.
    assert kept_snapshot.stat().st_mtime_ns == kept_written_at
    assert read_snapshot_index(output_dir) == read_snapshot_index(baseline_dir)
    for step in SNAPSHOT_STEPS:
        weights = "model.safetensors"
        assert (snapshot_path(output_dir, step) / weights).read_bytes() == \
            (snapshot_path(baseline_dir, step) / weights).read_bytes(), step
    assert load_pretrained(output_dir / "model").num_parameters() == baseline_metrics["num_parameters"]
    # Samples: the killed attempt's step 12 dropped and drawn again, once; the same text.
    assert sample_lines(output_dir) == sample_lines(baseline_dir)


def test_a_dataset_for_another_objective_is_refused_with_the_fix(tmp_path, stage_inputs):
    dataset = tmp_path / "dataset"
    write_counting_dataset(dataset, train_rows=16, validation_rows=16)
    index = json.loads((dataset / "index.json").read_text())
    (dataset / "index.json").write_text(json.dumps({**index, "objective": "mlm"}))
    context = make_context(tmp_path / "out", {**stage_inputs, "dataset": dataset})
    with pytest.raises(ValueError, match="set dataset.objective: clm"):
        run(context)


def test_async_checkpoints_train_the_same_and_the_last_one_is_what_a_restart_gets(uninterrupted, stage_inputs,
                                                                                  tmp_path):
    """pretrain.checkpoint_async (stages/training/async_checkpoint.py): the same losses and
    the same checkpoint files as the synchronous run, though written while training went
    on; and the checkpoint a restart resumes from is the last one, written in the
    background at the end."""
    baseline_dir, baseline_metrics = uninterrupted
    output_dir = tmp_path / "pretrain"
    config = {**CONFIG, "checkpoint_async": True}
    context = StageContext(name="pretrain", config=PretrainConfig(**config), experiment=SimpleNamespace(seed=0),
                           output_dir=output_dir, inputs=dict(stage_inputs))
    metrics = run(context)
    assert losses_by_step(output_dir) == losses_by_step(baseline_dir)
    assert metrics["val_loss"] == baseline_metrics["val_loss"]
    # Step 20's checkpoint is written in the background while steps 21-30 train: its files
    # hold step 20's state, as the synchronous run's do. (Whether a missing copy would show
    # here depends on timing; tests/unit/test_async_checkpoint.py checks the copy itself.)
    for step in (20, 30):
        name, tag = f"checkpoint-step{step:08d}", f"global_step{step}"
        ours, theirs = output_dir / "ray" / "pretrain" / name, baseline_dir / "ray" / "pretrain" / name
        assert (ours / "latest").read_text() == tag
        files = sorted(p.relative_to(theirs).as_posix() for p in theirs.rglob("*") if p.is_file())
        assert sorted(p.relative_to(ours).as_posix() for p in ours.rglob("*") if p.is_file()) == files
        for file in files:
            if file.endswith(".pt"):
                assert_same_tensors(torch.load(ours / file, weights_only=False),
                                    torch.load(theirs / file, weights_only=False), f"{name}/{file}")
            elif file.startswith("rng_state"):
                # torch's stream (dropout); Python's and numpy's are never seeded on a fresh
                # run, so they differ between any two runs, synchronous ones too.
                assert torch.equal(load_file(ours / file)["torch"], load_file(theirs / file)["torch"]), file
            elif not file.endswith(".py"):  # DeepSpeed's recovery scripts
                assert (ours / file).read_bytes() == (theirs / file).read_bytes(), f"{name}/{file}"

    # What a restarted run resumes from: Ray Train's committed record names the last
    # checkpoint, written in the background at the end, and nothing is left pending.
    record = json.loads((output_dir / "ray" / "pretrain" / "checkpoint_manager_snapshot.json").read_text())
    assert record["latest_checkpoint_result"]["checkpoint_dir_name"] == "checkpoint-step00000030"
    assert record["latest_checkpoint_result"]["metrics"]["steps"] == MAX_STEPS == metrics["steps"]
    assert record["pending_training_results"] == []


def assert_same_tensors(ours, theirs, where: str) -> None:
    """Every tensor of a torch.load'ed checkpoint file equal, wherever it sits."""
    if isinstance(ours, torch.Tensor):
        assert torch.equal(ours, theirs), where
    elif isinstance(ours, dict):
        assert list(ours) == list(theirs), where
        for key in ours:
            assert_same_tensors(ours[key], theirs[key], f"{where}[{key!r}]")
    elif isinstance(ours, (list, tuple)):
        assert len(ours) == len(theirs), where
        for index, (a, b) in enumerate(zip(ours, theirs)):
            assert_same_tensors(a, b, f"{where}[{index}]")
