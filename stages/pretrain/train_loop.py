"""The pretraining loop that every Ray Train worker runs (worker side of the stage).

    fit(train_loop_per_worker, job.as_loop_config(), ...)    # stages/pretrain/run.py

Everything the loop needs arrives as one PretrainJob (stages/pretrain/job.py), built and
checked by the driver: the pretrain section, the seed, the dataset, tokenizer and output
paths, the dataset's seq_len / vocab_size / special token ids, and what the driver
resolved from the user's files (init_from, deepspeed_config, eval_tasks). The engine comes
from create_engine with EngineSettings.from_pretrain (stages/training/engine_settings.py).

The loop is the same for every objective: the dataset's index.json names the objective
(clm, mlm with nsp / sop / none, span; see stages/objectives), which turns a
batch into a loss and per-objective statistics; stages/pretrain/metrics.py turns those
into the logged metrics.

One optimizer step = gradient_accumulation_steps micro batches of micro_batch_size
sequences on each of world_size workers. The loop resumes from the last committed
checkpoint (model, optimizer, lr schedule, data position, RNG), so a killed run that is
started again continues exactly where its checkpoint left off.

The loop itself trains, checkpoints and resumes; the rest is callbacks, called in order
after each step (stages/pretrain/callbacks): rank 0's progress line and metrics.jsonl /
wandb, the evaluation (validation loss here, and the in-loop tasks of pretrain.eval_tasks,
stages/pretrain/eval_tasks.py), the samples of pretrain.samples and the exported weights
(model/ and the snapshots of pretrain.snapshot_every). Evaluation, weight gathering and
checkpointing are collective: every rank takes part.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from stages.data.loader import ExampleLoader
from stages.data.mixing import MixtureLoader, mixture_parts, open_examples, part_dir
from stages.data.packed import read_index
from stages.models import build_model
from stages.models.build import padded_vocab_size
from stages.pretrain.callbacks.base import Callback, LoopState
from stages.pretrain.callbacks.checkpoint_summary import checkpoint_summary
from stages.pretrain.callbacks.evaluation import InLoopEval
from stages.pretrain.callbacks.sampling import Samples
from stages.pretrain.callbacks.snapshots import WeightExport
from stages.pretrain.callbacks.tracking import Progress, Tracking
from stages.pretrain.config import PretrainConfig
from stages.pretrain.eval_tasks import TaskEvaluator
from stages.pretrain.init_weights import build_initial_model, load_initial_weights
from stages.pretrain.job import PretrainJob
from stages.pretrain.metrics import (
    IntervalMeter, PartTotals, Throughput, mixture_validation, part_metrics, perplexity,
)
from stages.objectives.output import NUM_PREDICTIONS
from stages.objectives.registry import build_batch_builder, build_objective
from stages.pretrain.peak_flops import device_peak
from stages.pretrain.samples import SAMPLES_FILE, Sampler
from stages.training.async_checkpoint import open_checkpointer
from stages.training.checkpoint import restore_latest
from stages.training.engine import create_engine, optimizer_step
from stages.training.engine_settings import EngineSettings
from stages.training.model_source import ModelSource
from stages.training.parallelize import compile_loss_for, parallelize_for
from stages.training.preemption import PreemptionWatch
from stages.training.progress import ProgressLines
from stages.tracking import open_tracker


def train_loop_per_worker(loop_config: dict[str, Any]) -> None:
    """Train per the PretrainJob in `loop_config` (PretrainJob.as_loop_config())."""
    import ray.train

    job = PretrainJob.from_loop_config(loop_config)
    # Its paths (deepspeed_config, eval_tasks, init_from) are never read here: the driver
    # resolved them into job.user_deepspeed_config, job.eval_plans and job.init_source.
    cfg = job.config
    context = ray.train.get_context()
    rank, world_size = context.get_world_rank(), context.get_world_size()
    seed = job.seed
    is_main = rank == 0

    # Same seed on every rank: identical initial weights (DeepSpeed also broadcasts them).
    torch.manual_seed(seed)
    model = _build_model(job)
    if job.init_source is not None and ray.train.get_checkpoint() is None:
        # Before the engine exists (ZeRO-3 would shard the parameters); resuming restores
        # the run's own checkpoint into the engine instead.
        _load_init_from(model, job.init_source, is_main)
    num_parameters = model.num_parameters()
    # SBO from the built model, not cfg.model: with init_from the checkpoint's architecture decides.
    objective = build_objective(read_index(job.dataset_dir), cfg.model.family, job.dataset_dir / "index.json",
                                span_boundary=getattr(model.config, "span_boundary_objective", False),
                                variant=getattr(model.config, "variant", None))
    # Before the engine: ZeRO-3 empties the module's parameters, and the estimate counts them.
    flops_per_sample = objective.flops_per_sample(model)
    # Activation checkpointing and per-block compilation wrap the model from outside; its
    # state dict names (checkpoints, exported weights) stay the plain model's.
    parallelize_for(model, cfg)
    compile_loss_for(objective, cfg)  # the loss over the vocabulary, fused (pretrain.compile)
    # DeepSpeed config from the section's engine settings, with the user's raw DeepSpeed
    # JSON (read by the driver) merged over it; AdamW and the lr schedule from them too.
    engine = create_engine(model, EngineSettings.from_pretrain(cfg),
                           user_deepspeed_config=job.user_deepspeed_config)
    # Endless (epoch after epoch, reshuffled per epoch); its state is one global position.
    # A dataset.mixture gives one loader per source, mixed by weight: every rank draws the
    # same source for each global micro batch (stages/data/mixing.py).
    train_loader = open_examples(
        job.dataset_dir, "train", cfg.micro_batch_size, rank, world_size, seed, shuffle=True,
        batch_builder=build_batch_builder)
    mixture_sources = tuple(train_loader.names) if isinstance(train_loader, MixtureLoader) else ()
    checkpointer = open_checkpointer(engine, asynchronous=cfg.checkpoint_async)  # pretrain.checkpoint_async

    step = 0
    state = restore_latest(engine)
    if state is not None:
        step = state["step"]
        train_loader.load_state_dict(state["loader"])
    resumed_from_step = step
    # Per-rank seed for anything random inside the loop (dropout): ranks see different
    # data, so they should not share dropout masks either. Restored RNG state wins.
    if state is None:
        torch.manual_seed(seed + 1000 + rank)

    callbacks = _callbacks(job, engine, objective, rank, world_size, step)
    throughput = _throughput(cfg, engine.device, objective, flops_per_sample, world_size, is_main)
    tokens_per_step = throughput.samples_per_step * throughput.tokens_per_sample
    loop = LoopState(step=step, resumed_from_step=resumed_from_step, tokens_per_step=tokens_per_step,
                     tokens_seen=state.get("tokens_seen", step * tokens_per_step) if state is not None else 0)
    meter = IntervalMeter(objective.parts, engine.device, sources=mixture_sources)
    for callback in callbacks:
        callback.pre_train(loop)
    preemption = PreemptionWatch.start()  # SIGTERM or a node drain: checkpoint, then stop
    engine.train()
    while loop.step < cfg.max_steps:
        started = time.perf_counter()
        lr = engine.get_lr()[0]  # the rate this step's update uses
        data_seconds = 0.0
        for _ in range(cfg.gradient_accumulation_steps):
            fetch_started = time.perf_counter()
            batch = _to_device(next(train_loader), engine.device)  # dict of (B, ...) tensors
            data_seconds += time.perf_counter() - fetch_started
            output = objective(engine, batch, label_smoothing=cfg.label_smoothing)
            engine.backward(output.loss)
            # Updates only at the accumulation boundary (the last micro batch).
            grad_norm = optimizer_step(engine)
            # Summed on the device and read at logging steps only: a .item() here would
            # make the host wait for every micro batch's GPU work.
            meter.add(output, source=train_loader.last_source if mixture_sources else None)
        loop.step += 1
        loop.tokens_seen += tokens_per_step
        elapsed = time.perf_counter() - started
        loop.train_seconds += elapsed
        loop.steps_this_session += 1
        meter.add_step(elapsed, data_seconds)

        loop.metrics = (dict(step=loop.step, **meter.summarize(throughput), lr=lr, grad_norm=grad_norm)
                        if loop.step % cfg.log_every == 0 or loop.step == cfg.max_steps else {})
        for callback in callbacks:
            callback.post_step(loop)
        # Every step, on every rank (collective): was any rank told that its node goes away?
        preempted = preemption.stop_requested() and loop.step < cfg.max_steps
        if loop.step % cfg.checkpoint_every == 0 or loop.step == cfg.max_steps or preempted:
            checkpointer.save(loop.step, {"loader": train_loader.state_dict(), "tokens_seen": loop.tokens_seen},
                              checkpoint_summary(loop, num_parameters, callbacks))
        if preempted:
            checkpointer.finish()  # committed before the workers go
            preemption.stop(loop.step)  # raises Preempted: Ray Train restarts the workers from it
    checkpointer.finish()  # the last checkpoint is written (or its failure raised) before the run ends
    preemption.close()
    for callback in callbacks:
        callback.post_train(loop)


def _callbacks(job: PretrainJob, engine, objective, rank: int, world_size: int, step: int) -> list[Callback]:
    """In the order of the work within a step (callbacks/base.py)."""
    cfg, is_main = job.config, rank == 0
    tracking = Tracking(open_tracker(
        experiment=job.experiment, stage="pretrain", fingerprint=job.fingerprint, output_dir=job.output_dir,
        config=cfg.model_dump(), metrics_log=job.metrics_log) if is_main else None)
    sampler = (Sampler(job.sample_plan, cfg.samples, job.tokenizer_path, engine.device, job.output_dir / SAMPLES_FILE)
               if job.sample_plan is not None else None)
    task_evaluator = TaskEvaluator(
        job.eval_plans, cfg.model.family, job.tokenizer_path, job.eval_token_ids, batch_size=cfg.micro_batch_size,
        engine=engine, rank=rank, world_size=world_size) if job.eval_plans else None
    return [
        Progress(ProgressLines("[pretrain]", cfg.max_steps, initial=step, rate_unit="tokens") if is_main else None),
        InLoopEval(cfg, engine, lambda: evaluate(engine, objective, job, rank, world_size), task_evaluator),
        tracking,
        *([Samples(sampler, tracking, cfg, engine, is_main)] if sampler is not None else []),
        WeightExport(job, engine, is_main, lambda: _build_model(job)),
    ]


def _throughput(cfg: PretrainConfig, device: torch.device, objective, flops_per_sample: float, world_size: int,
                is_main: bool) -> Throughput:
    peak = device_peak(cfg.peak_tflops, device)  # None on a CPU without pretrain.peak_tflops: no MFU
    if peak.note and is_main:
        print(peak.note, file=sys.stderr, flush=True)
    return Throughput(
        samples_per_step=cfg.micro_batch_size * cfg.gradient_accumulation_steps * world_size,
        tokens_per_sample=objective.tokens_per_sample,
        flops_per_sample=flops_per_sample,
        peak_flops=peak.tflops * 1e12 * world_size if peak.tflops else None,
        peak_source=peak.source, warn=is_main,
    )


def _build_model(job: PretrainJob):
    if job.init_source is not None:  # pretrain.init_from: the checkpoint's architecture
        return build_initial_model(job.init_source, job.token_ids)
    model_cfg = job.config.model
    vocab_size = padded_vocab_size(job.vocab_size, model_cfg.pad_vocab_to_multiple_of)
    return build_model(model_cfg.architecture(), vocab_size=vocab_size, max_seq_len=job.seq_len, **job.token_ids)


def _load_init_from(model, source: ModelSource, is_main: bool) -> None:
    fresh = load_initial_weights(model, source)
    if is_main:
        print(f"[pretrain] init_from {source.path}: loaded {source.weights_file}"
              + (f"; not in the checkpoint, freshly initialised: {', '.join(fresh)}" if fresh else ""),
              flush=True)


def _to_device(batch: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    return {name: tensor.to(device) for name, tensor in batch.items()}


@torch.no_grad()
def evaluate(engine, objective, job: PretrainJob, rank: int, world_size: int) -> dict[str, float]:
    """Validation metrics over the first eval_batches batches per rank (all of the split
    if it is smaller), summed over every prediction of every rank, without label
    smoothing: val_loss (the objective's total), val_<part>_loss and _accuracy, and
    val_perplexity of the language-modelling part (clm, mlm or span). A fresh unshuffled
    loader each time, so every evaluation scores the same rows. With dataset.mixture,
    each source's validation split is scored this way (val_loss/<source>) and the
    metrics are their weighted mean."""
    engine.eval()
    cfg, dataset_dir = job.config, job.dataset_dir
    parts = mixture_parts(read_index(dataset_dir))
    if not parts:
        record = _validation_record(engine, objective, dataset_dir, cfg, job.seed, rank, world_size)
    else:
        records = {part["name"]: _validation_record(engine, objective, part_dir(dataset_dir, part), cfg,
                                                    job.seed, rank, world_size)
                   for part in parts}
        record = mixture_validation(records, {part["name"]: part["weight"] for part in parts},
                                    objective.parts[0])
    engine.train()
    return record


def _validation_record(engine, objective, dataset_dir: str | Path, cfg: PretrainConfig, seed: int, rank: int,
                       world_size: int) -> dict[str, float]:
    loader = ExampleLoader(dataset_dir, "validation", cfg.micro_batch_size, rank, world_size, seed,
                           shuffle=False, drop_last=False, batch_builder=build_batch_builder)
    totals = PartTotals(objective.parts, engine.device)  # on the engine's device: NCCL reduces GPU tensors only
    for _ in range(min(cfg.eval_batches, len(loader))):  # the loader is endless
        batch = _to_device(next(loader), engine.device)  # B may be smaller, even 0, in the last batch
        if batch["input_ids"].size(0) == 0:
            # Still run a forward pass: under ZeRO-3 it gathers parameters collectively,
            # and a rank that skipped it would leave the others waiting. Not scored.
            objective(engine, _placeholder_batch(batch))
            continue
        totals.add(objective(engine, batch))
    dist.all_reduce(totals.totals)
    lm_part = objective.parts[0]
    if float(totals.totals[0, NUM_PREDICTIONS]) == 0:
        engine.train()
        raise RuntimeError(
            f"the validation split of {dataset_dir} is empty; the dataset stage "
            "must write validation rows (dataset.validation_fraction)"
        )
    record = part_metrics(totals.as_dict(), prefix="val_")
    record["val_perplexity"] = perplexity(record[f"val_{lm_part}_loss"])
    return record


def _placeholder_batch(empty: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """One row shaped like `empty`'s columns: nothing to predict, nothing masked out."""
    batch = {name: torch.zeros((1, *t.shape[1:]), dtype=t.dtype, device=t.device) for name, t in empty.items()}
    if "attention_mask" in batch:
        batch["attention_mask"].fill_(1)
    return batch
