"""The pretraining loop that every Ray Train worker runs (worker side of the stage).

    fit(train_loop_per_worker, job.as_loop_config(), ...)    # stages/pretrain/run.py

Everything the loop needs arrives as one PretrainJob (stages/pretrain/job.py), built and
checked by the driver: the pretrain section, the seed, the dataset, tokenizer and output
paths, the dataset's seq_len / vocab_size / special token ids, and what the driver
resolved from the user's files (init_from, deepspeed_config, eval_tasks). The engine comes
from create_engine with EngineSettings.from_pretrain (stages/training/engine_settings.py).

The loop is the same for every objective: the dataset's index.json names the objective
(clm, mlm with nsp / sop / none, span; see stages/pretrain/objectives), which turns a
batch into a loss and per-objective statistics; stages/pretrain/metrics.py turns those
into the logged metrics.

One optimizer step = gradient_accumulation_steps micro batches of micro_batch_size
sequences on each of world_size workers. The loop resumes from the last committed
checkpoint (model, optimizer, lr schedule, data position, RNG), so a killed run that is
started again continues exactly where its checkpoint left off.

Rank 0 writes metrics.jsonl, prints a progress line every few steps
(stages/training/progress.py), exports the final model (and the snapshots of
pretrain.snapshot_every, stages/pretrain/snapshots.py) and draws the samples of
pretrain.samples (stages/pretrain/samples.py; under ZeRO-3 every rank runs the same
forwards); every rank takes part in evaluation (validation loss and the in-loop tasks of
pretrain.eval_tasks, stages/pretrain/eval_tasks.py), weight gathering and checkpointing,
which are collective.
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
from stages.pretrain.config import PretrainConfig
from stages.pretrain.eval_tasks import TaskEvaluator
from stages.pretrain.init_weights import build_initial_model, load_initial_weights
from stages.pretrain.job import PretrainJob
from stages.pretrain.metrics import (
    IntervalMeter, PartTotals, Throughput, mixture_validation, part_metrics, perplexity,
)
from stages.pretrain.objectives import build_objective
from stages.pretrain.objectives.base import NUM_PREDICTIONS
from stages.pretrain.peak_flops import device_peak
from stages.pretrain.samples import SAMPLES_FILE, Sampler
from stages.pretrain.snapshots import record_snapshot, remove_partial_snapshots, snapshot_path, write_model_folder
from stages.training.async_checkpoint import open_checkpointer
from stages.training.checkpoint import restore_latest
from stages.training.engine import create_engine, full_fp32_state_dict, optimizer_step
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
    output_dir = job.output_dir
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
        job.dataset_dir, "train", cfg.micro_batch_size, rank, world_size, seed, shuffle=True
    )
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

    tracker = open_tracker(
        experiment=job.experiment, stage="pretrain", fingerprint=job.fingerprint, output_dir=output_dir,
        config=cfg.model_dump(), metrics_log=job.metrics_log) if is_main else None
    if tracker is not None:
        # The steps after the checkpoint (logged before a crash, or by an attempt killed
        # before its first checkpoint) are trained again: drop their records, so that
        # metrics.jsonl holds each step once.
        tracker.metrics_log.drop_records_after(resumed_from_step)
    sampler = (Sampler(job.sample_plan, cfg.samples, job.tokenizer_path, engine.device, output_dir / SAMPLES_FILE)
               if job.sample_plan is not None else None)
    if sampler is not None and is_main:
        sampler.resume(resumed_from_step)  # as metrics.jsonl: each step's samples once

    peak = device_peak(cfg.peak_tflops, engine.device)  # None on a CPU without pretrain.peak_tflops: no MFU
    if peak.note and is_main:
        print(peak.note, file=sys.stderr, flush=True)
    throughput = Throughput(
        samples_per_step=cfg.micro_batch_size * cfg.gradient_accumulation_steps * world_size,
        tokens_per_sample=objective.tokens_per_sample,
        flops_per_sample=flops_per_sample,
        peak_flops=peak.tflops * 1e12 * world_size if peak.tflops else None,
        peak_source=peak.source, warn=is_main,
    )
    tokens_per_step = throughput.samples_per_step * throughput.tokens_per_sample
    # Counted, not step x tokens_per_step: a run may resume on another number of workers.
    tokens_seen = state.get("tokens_seen", step * tokens_per_step) if state is not None else 0
    task_evaluator = TaskEvaluator(
        job.eval_plans, cfg.model.family, job.tokenizer_path, job.eval_token_ids, batch_size=cfg.micro_batch_size,
        engine=engine, rank=rank, world_size=world_size) if job.eval_plans else None
    if is_main and cfg.snapshot_every:
        remove_partial_snapshots(output_dir)
    meter = IntervalMeter(objective.parts, engine.device, sources=mixture_sources)
    progress = ProgressLines("[pretrain]", cfg.max_steps, initial=step, rate_unit="tokens") if is_main else None
    train_seconds, steps_this_session, sampling_seconds = 0.0, 0, 0.0
    last_metrics: dict[str, Any] = {}
    preemption = PreemptionWatch.start()  # SIGTERM or a node drain: checkpoint, then stop
    engine.train()
    while step < cfg.max_steps:
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
        step += 1
        tokens_seen += tokens_per_step
        elapsed = time.perf_counter() - started
        train_seconds += elapsed
        steps_this_session += 1
        meter.add_step(elapsed, data_seconds)

        record: dict[str, Any] = {}
        if step % cfg.log_every == 0 or step == cfg.max_steps:
            record.update(step=step, **meter.summarize(throughput), lr=lr, grad_norm=grad_norm)
        if progress is not None:  # the loss: the last interval's mean, already on the host
            progress.update(1, amount=tokens_per_step, loss=record.get("loss"))
        if step % cfg.eval_every == 0 or step == cfg.max_steps:
            record.update(step=step, **evaluate(engine, objective, job, rank, world_size))
            if task_evaluator is not None:
                record.update(task_evaluator.evaluate(engine))
        if record:
            last_metrics.update(record)
            if tracker is not None:
                tracker.log(record, step=step)

        # Before the checkpoint (a committed one implies its samples are written); outside
        # the step's timing, so throughput does not count it.
        if sampler is not None and sampler.due(step, cfg):
            sampling_seconds += sampler.sample_live(engine, step, tokens_seen, is_main, tracker)
        # Before the checkpoint: a committed checkpoint implies its snapshots are complete.
        destinations = [output_dir / "model"] if step == cfg.max_steps else []
        snapshot_due = bool(cfg.snapshot_every) and step % cfg.snapshot_every == 0
        if snapshot_due and not _snapshot_exists(output_dir, step, is_main):
            destinations.append(snapshot_path(output_dir, step))
        _write_weights(engine, job, destinations, is_main)
        if snapshot_due and is_main:
            record_snapshot(output_dir, step, tokens_seen)
        # Every step, on every rank (collective): was any rank told that its node goes away?
        preempted = preemption.stop_requested() and step < cfg.max_steps
        if step % cfg.checkpoint_every == 0 or step == cfg.max_steps or preempted:
            summary = {
                "steps": step,
                "final_loss": last_metrics.get("loss"),
                "val_loss": last_metrics.get("val_loss"),
                "val_perplexity": last_metrics.get("val_perplexity"),
                "tokens_per_second": tokens_per_step * steps_this_session / max(train_seconds, 1e-9),
                "num_parameters": num_parameters,
                "resumed_from_step": resumed_from_step,
                "mfu": last_metrics.get("mfu"),
                **({"sampling_seconds": sampling_seconds} if sampler is not None else {}),
                # per-objective validation losses and accuracies (val_mlm_accuracy, ...),
                # and the last in-loop task scores (eval/<task>/<metric>)
                **{k: v for k, v in last_metrics.items() if k.startswith(("val_", "eval/"))},
            }
            checkpointer.save(step, {"loader": train_loader.state_dict(), "tokens_seen": tokens_seen},
                              summary)
        if preempted:
            checkpointer.finish()  # committed before the workers go
            preemption.stop(step)  # raises Preempted: Ray Train restarts the workers from it
    checkpointer.finish()  # the last checkpoint is written (or its failure raised) before the run ends
    preemption.close()
    if progress is not None:
        progress.close()
    if tracker is not None:
        tracker.summary(last_metrics)
        tracker.finish()

    if steps_this_session == 0:
        # Resumed from the final checkpoint: the run had finished, but the driver died
        # before the engine recorded it. Export again (cheap) in case model/ is missing;
        # every rank must take part, so this does not depend on what one rank sees.
        _write_weights(engine, job, [output_dir / "model"], is_main)


def _build_model(job: PretrainJob):
    if job.init_source is not None:  # pretrain.init_from: the checkpoint's architecture
        return build_initial_model(job.init_source, job.token_ids)
    model_cfg = job.config.model
    vocab_size = padded_vocab_size(job.vocab_size, model_cfg.pad_vocab_to_multiple_of)
    return build_model(model_cfg, vocab_size=vocab_size, max_seq_len=job.seq_len, **job.token_ids)


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
                           shuffle=False, drop_last=False)
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


def _write_weights(engine, job: PretrainJob, destinations: list[Path], is_main: bool) -> None:
    """Rank 0 writes the full fp32 weights, model_config.json and tokenizer.json into each
    of `destinations` (output_dir/model, a snapshot folder), each renamed into place when
    complete. Collective when there is anything to write, because gathering sharded
    weights is: every rank must pass the same number of destinations."""
    if not destinations:
        return
    state_dict = full_fp32_state_dict(engine)  # gathered once for every destination
    if not is_main:
        return
    model = _build_model(job)
    model.load_state_dict(state_dict, strict=True)
    for final in destinations:
        final.parent.mkdir(parents=True, exist_ok=True)
        write_model_folder(model, job.tokenizer_path, final)


def _snapshot_exists(output_dir: Path, step: int, is_main: bool) -> bool:
    """Whether an earlier attempt of this run wrote the snapshot of `step` (a resumed run
    keeps it). Rank 0 looks and tells the others, so that every rank takes the same
    decision about the collective weight gathering."""
    decision = [snapshot_path(output_dir, step).is_dir() if is_main else None]
    dist.broadcast_object_list(decision, src=0)
    return bool(decision[0])
