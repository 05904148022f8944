"""The fine-tuning loop that runs on every Ray Train worker (one data-parallel rank).

    fit(finetune_worker, {"job": job}, num_workers=2, ...)   # from stages.finetune.run

Same path as pretraining: a pretrained backbone plus the task family's model
(`families`: a head, or a T5 as text to text), wrapped by `initialize_engine`
(DeepSpeed, torch AdamW, warmup + linear decay) with a config from
`build_deepspeed_config`, checkpointed to Ray Train with `report_checkpoint` at the end
of every epoch and resumed with `restore_latest`. After training, all ranks predict the
dev and test sets (a shard each) and rank 0 writes the raw outputs and the fine-tuned
weights into the task directory; the driver turns them into metrics and files.

Rank 0 streams the task's curves (`stages.finetune.task_tracking`): train loss, gradient
norm, lr and throughput every `log_every` optimizer steps, and the dev scores after
every epoch (`eval_every_epoch`; always after the last), to metrics.jsonl and the
task's wandb run. Losses are summed on the device and read only when a record is
written, so the host never waits for a micro batch just to log it.

What a worker gets: a `stages.finetune.job.FinetuneJob` (its fields are documented there).
"""

from __future__ import annotations

import math
import os
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from stages.finetune.batches import merge_shards, micro_batches_per_epoch, prediction_shard, train_batches
from stages.finetune.encode import EncodedSplit
from stages.finetune.families.registry import family_named
from stages.finetune.job import FinetuneJob
from stages.finetune.outputs import OUTPUTS_NAME
from stages.finetune.saved_model import save_finetuned
from stages.finetune.task_family import TaskFamily
from stages.finetune.task_tracking import open_task_tracker, prefixed

__all__ = ["MODEL_DIR", "OUTPUTS_NAME", "finetune_worker"]

MODEL_DIR = "model"  # see stages.finetune.saved_model


def finetune_worker(loop_config: dict[str, Any]) -> None:
    import ray
    import ray.train

    from stages.finetune.model_source import load_backbone
    from stages.training.checkpoint import report_checkpoint, restore_latest
    from stages.training.engine import full_fp32_state_dict, optimizer_step
    from stages.training.progress import ProgressLines

    # Ray Train hands train_loop_config to the loop as a dict: the job is its one entry.
    job: FinetuneJob = loop_config["job"]
    cfg, seed, family = job.config, job.seed, family_named(job.family)
    context = ray.train.get_context()
    rank, world_size = context.get_world_rank(), context.get_world_size()
    data: dict[str, EncodedSplit] = ray.get(job.data)
    train = data["train"]

    # Same seed on every rank: the new head starts identical everywhere.
    torch.manual_seed(seed)
    model = family.worker_model(job, load_backbone(job.source))
    micro_batches = micro_batches_per_epoch(len(train), world_size, cfg.micro_batch_size)
    num_epochs, total_steps = _run_length(cfg, micro_batches)
    engine = _build_engine(model, cfg, total_steps)

    state = restore_latest(engine)
    first_epoch = 0 if state is None else state["epoch"] + 1
    best = _best_checkpoint(job, fresh_start=state is None, rank=rank)
    snapshots = _weight_snapshots(job, fresh_start=state is None, rank=rank)
    if state is None:
        # Per-rank dropout masks: ranks see different rows, so they should not share noise.
        # A restored run keeps the RNG state it was saved with instead.
        torch.manual_seed(seed + 1000 + rank)
    tracker = open_task_tracker(job) if rank == 0 else None
    if tracker is not None:
        tracker.metrics_log.drop_records_after(engine.global_steps)
    scores: dict[str, float] = {}  # the latest of every split's scores, "dev_f1": ...

    losses = _LossWindow(tracker, cfg.log_every, engine.device)
    progress = ProgressLines(f"[finetune] {job.task}:", micro_batches * cfg.epochs,
                             initial=micro_batches * first_epoch, unit="batch",
                             rate_unit="examples") if rank == 0 else None
    dev_outputs = None
    for epoch in range(first_epoch, num_epochs):
        engine.train()
        for positions in train_batches(len(train), micro_batch_size=cfg.micro_batch_size,
                                       epoch=epoch, seed=seed, rank=rank, world_size=world_size):
            if engine.global_steps >= total_steps:  # finetune.max_steps reached mid-epoch
                break
            lr = engine.get_lr()[0]  # the rate this step's update uses
            loss = engine(**_on_device(_batch(train, positions, family), engine.device))[-1]
            engine.backward(loss)
            boundary = engine.is_gradient_accumulation_boundary()
            grad_norm = optimizer_step(engine)  # updates (and has a norm) only at the accumulation boundary
            losses.add(loss, len(positions))
            if boundary:
                losses.maybe_write(engine.global_steps, epoch, lr, grad_norm, last=engine.global_steps == total_steps)
                _maybe_snapshot(snapshots, engine, cfg, total_steps, rank, epoch_end=False)
            if progress is not None:
                progress.update(1, amount=len(positions) * world_size)
        _maybe_snapshot(snapshots, engine, cfg, total_steps, rank, epoch_end=True)
        if cfg.eval_every_epoch or epoch == num_epochs - 1:
            dev_outputs = _predict(engine, data["dev"], cfg.eval_batch_size, rank, world_size)
            # keep_best: every rank scores the same gathered outputs, so all decide alike.
            dev_scores = _score(job.scorers, {"dev": dev_outputs}) if tracker is not None or best is not None else {}
            if tracker is not None:
                # Logged before the checkpoint: a resume drops records past its
                # checkpoint, so a crash in between does not leave these twice.
                tracker.log({"epoch": epoch, **dev_scores}, step=engine.global_steps)
                scores.update(dev_scores)
            if best is not None and best.consider(epoch, dev_scores):
                best_state = full_fp32_state_dict(engine)  # collective
                if rank == 0:
                    best.save(best_state, epoch)
        report_checkpoint(engine, engine.global_steps, {"epoch": epoch},
                          {"epoch": epoch, "step": engine.global_steps})
    if progress is not None:
        progress.close()

    task_dir = Path(job.task_dir)
    best_state = None
    if best is not None:
        dist.barrier()  # rank 0's last save is on disk before anyone reads it
        best_state = best.load_state_dict()
        engine.module.load_state_dict(best_state)  # ZeRO <= 2: the module holds whole weights
        dev_outputs = None  # the best epoch's dev predictions are predicted again below
        scores = {}
        if tracker is not None:
            tracker.log({"best_epoch": best.best_epoch, f"best_dev_{best.metric}": best.record["score"]},
                        step=engine.global_steps)
    if snapshots is not None:  # finetune.average_last: the averaged weights predict and are saved
        dist.barrier()  # rank 0's last snapshot is on disk before anyone reads it
        best_state = snapshots.average()
        engine.module.load_state_dict(best_state)  # ZeRO <= 2: the module holds whole weights
        dev_outputs, scores = None, {}
    # The last epoch's dev evaluation is the final one (none ran if this run resumed
    # from the last epoch's checkpoint).
    outputs = {split: (dev_outputs if split == "dev" and dev_outputs is not None else
                       _predict(engine, data[split], cfg.eval_batch_size, rank, world_size))
               for split in job.predict_splits}
    if rank == 0:
        _write_npz_atomic(task_dir / OUTPUTS_NAME, outputs)
        if dev_outputs is None:  # resumed after the last epoch: its dev record is logged already
            scores.update(_score(job.scorers, {"dev": outputs["dev"]}))
        test_scores = _score(job.scorers, {split: out for split, out in outputs.items() if split != "dev"})
        if test_scores:
            tracker.log(test_scores, step=engine.global_steps)
        scores.update(test_scores)
        if best is not None:
            scores["best_epoch"] = best.best_epoch
        tracker.summary({**scores, "train_examples": len(train), "epochs": cfg.epochs,
                         "steps": engine.global_steps, "num_workers": world_size})
        tracker.finish()
    if cfg.save_model:
        _export_model(engine, job, family, task_dir / MODEL_DIR, rank, state_dict=best_state)


def _run_length(cfg, micro_batches: int) -> tuple[int, int]:
    """(epochs, optimizer steps): finetune.epochs of the training set, or finetune.max_steps
    steps in as many epochs as they take (the last one cut short)."""
    steps_per_epoch = max(1, micro_batches // cfg.gradient_accumulation_steps)
    if cfg.max_steps is not None:
        return math.ceil(cfg.max_steps / steps_per_epoch), cfg.max_steps
    return cfg.epochs, max(1, micro_batches * cfg.epochs // cfg.gradient_accumulation_steps)


def _weight_snapshots(job: FinetuneJob, *, fresh_start: bool, rank: int):
    """finetune.average_last: the last N weight snapshots, on disk (they survive a resume);
    None when the option is off."""
    if job.config.average_last is None:
        return None
    from stages.finetune.seq2seq.average import AVERAGE_DIR, WeightSnapshots

    snapshots = WeightSnapshots(Path(job.task_dir) / AVERAGE_DIR, keep=job.config.average_last)
    if fresh_start and rank == 0:
        snapshots.forget()
    dist.barrier()  # nobody snapshots before rank 0 has removed an older run's
    return snapshots


def _maybe_snapshot(snapshots, engine, cfg, total_steps: int, rank: int, *, epoch_end: bool) -> None:
    """Every rank calls it at the same points: gathering the weights is collective."""
    from stages.finetune.seq2seq.average import snapshot_due
    from stages.training.engine import full_fp32_state_dict

    if snapshots is None or not snapshot_due(engine.global_steps, total_steps, cfg.average_every, epoch_end):
        return
    state = full_fp32_state_dict(engine)
    if rank == 0:
        snapshots.save(state, engine.global_steps)


def _build_engine(model: torch.nn.Module, cfg, total_steps: int):
    """DeepSpeed over `model` for the finetune section `cfg`: AdamW, the lr warmed up over
    finetune.warmup_fraction of `total_steps` optimizer steps, then decayed linearly to 0."""
    from stages.training.engine import create_engine
    from stages.training.engine_settings import EngineSettings

    # The builder pretraining uses (stages/training/engine.py), with the fine-tuning schedule.
    return create_engine(model, EngineSettings.for_finetuning(cfg, total_steps))


def _score(scorers: dict, outputs: dict[str, np.ndarray]) -> dict[str, float]:
    """{"dev_accuracy": ..., "test_f1": ...} for the splits that have a scorer."""
    scores: dict[str, float] = {}
    for split, split_outputs in outputs.items():
        if split in scorers:
            scores.update(prefixed(f"{split}_", scorers[split](split_outputs)))
    return scores


def _batch(split: EncodedSplit, positions: np.ndarray, family: TaskFamily | None = None) -> dict[str, torch.Tensor]:
    """family None: inputs only (prediction); else also the labels, as that family lays them out."""
    batch = {
        "input_ids": torch.from_numpy(split.input_ids[positions].astype(np.int64)),  # (B, T)
        "attention_mask": torch.from_numpy(split.attention_mask[positions].astype(np.int64)),  # (B, T)
    }
    if split.token_type_ids is not None:
        batch["token_type_ids"] = torch.from_numpy(split.token_type_ids[positions].astype(np.int64))  # (B, T)
    if family is not None and split.labels is not None:
        batch.update(family.batch_labels(torch.from_numpy(split.labels[positions])))
    return batch


def _on_device(batch: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    return {name: tensor.to(device) for name, tensor in batch.items()}


@torch.no_grad()
def _predict(engine, split: EncodedSplit, batch_size: int, rank: int, world_size: int) -> np.ndarray:
    """Head outputs for every row of `split`, (N, num_labels), on every rank. Each rank
    runs its shard; the shards are exchanged with one all_gather."""
    engine.eval()
    mine = prediction_shard(len(split), rank=rank, world_size=world_size)
    from stages.finetune.model_source import flat_outputs

    outputs = [flat_outputs(engine(**_on_device(_batch(split, mine[i:i + batch_size]), engine.device))).cpu().numpy()
               for i in range(0, len(mine), batch_size)]
    shards: list = [None] * world_size
    dist.all_gather_object(shards, (mine, np.concatenate(outputs)))
    return merge_shards(len(split), shards)


def _best_checkpoint(job: FinetuneJob, *, fresh_start: bool, rank: int):
    """finetune.keep_best: the best dev epoch so far (on disk, so it survives a resume);
    None when the option is off."""
    if not job.config.keep_best:
        return None
    from stages.finetune.best_checkpoint import BEST_DIR, BestDevCheckpoint

    best = BestDevCheckpoint(Path(job.task_dir) / BEST_DIR, job.primary_metric)
    if fresh_start:
        best.forget(remove=rank == 0)
    dist.barrier()  # nobody writes a new best before rank 0 has removed the old one
    return best


def _export_model(engine, job: FinetuneJob, family: TaskFamily, directory: Path, rank: int,
                  state_dict: dict[str, torch.Tensor] | None = None) -> None:
    """Rank 0 writes the fine-tuned model. Collective, because gathering the weights from
    ZeRO shards (or bf16 master copies) is; written aside and swapped into place, so a
    crash never leaves a half-written model/ behind."""
    from stages.training.engine import full_fp32_state_dict

    if state_dict is None:  # else the best dev epoch's weights (finetune.keep_best)
        state_dict = full_fp32_state_dict(engine)
    if rank != 0:
        return
    live = engine.module
    # A fresh model that owns its weights (the engine's are views into DeepSpeed buffers).
    model = family.build_model(job.head_config, type(live.backbone)(live.backbone.config))
    model.load_state_dict(state_dict, strict=True)
    staging = directory.with_name(directory.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    save_finetuned(model, staging, head_config=job.head_config, tokenizer_path=job.source.tokenizer)
    shutil.rmtree(directory, ignore_errors=True)
    os.replace(staging, directory)


def _write_npz_atomic(path: Path, arrays: dict[str, np.ndarray]) -> None:
    # The driver reads this file after `fit`; a crash mid-write must not leave a file
    # that looks complete.
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(temp, "wb") as f:
        np.savez(f, **arrays)
    os.replace(temp, path)


class _LossWindow:
    """Mean training loss since the last record, averaged over ranks, written with the
    last optimizer step's gradient norm every `log_every` optimizer steps and at the last
    one. Every rank calls `maybe_write` at the same steps (it all-reduces, a collective);
    only rank 0 has a log to write to.

    The losses are summed on the engine's device, in float64 and in micro-batch order, so
    the mean is exactly that of the losses read one by one as Python floats, without a
    host sync per micro batch."""

    def __init__(self, tracker, log_every: int, device: torch.device):
        self.tracker, self.log_every = tracker, log_every
        self.device = device
        self._reset()

    def _reset(self) -> None:
        self.loss_sum = torch.zeros((), dtype=torch.float64, device=self.device)
        self.batches, self.examples = 0, 0
        self.started = time.perf_counter()

    def add(self, loss: torch.Tensor, num_examples: int) -> None:
        self.loss_sum += loss.detach().double()
        self.batches += 1
        self.examples += num_examples

    def maybe_write(self, step: int, epoch: int, lr: float, grad_norm: float | None, last: bool) -> None:
        if (step % self.log_every != 0 and not last) or self.batches == 0:
            return
        # On the engine's device: NCCL reduces only GPU tensors (gloo takes either).
        counts = torch.tensor([self.batches, self.examples], dtype=torch.float64, device=self.device)
        totals = torch.cat([self.loss_sum.view(1), counts])
        dist.all_reduce(totals)  # sums over ranks
        loss, examples = float(totals[0] / totals[1]), float(totals[2])  # waits for the device's work
        seconds = time.perf_counter() - self.started
        if self.tracker is not None:
            record = {"epoch": epoch, "loss": loss, "lr": lr, "examples_per_s": examples / seconds}
            if grad_norm is not None:
                record["grad_norm"] = grad_norm
            self.tracker.log(record, step=step)
        self._reset()
