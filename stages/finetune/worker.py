"""The fine-tuning loop that runs on every Ray Train worker (one data-parallel rank).

    fit(finetune_worker, loop_config, num_workers=2, ...)   # from stages.finetune.run

Same path as pretraining: a pretrained backbone plus a task head, wrapped by
`initialize_engine` (DeepSpeed, torch AdamW, warmup + linear decay) with a config from
`build_deepspeed_config`, checkpointed to Ray Train with `report_checkpoint` at the end
of every epoch and resumed with `restore_latest`. After training, all ranks predict the
dev and test sets (a shard each) and rank 0 writes the raw outputs and the fine-tuned
weights into the task directory; the driver turns them into metrics and GLUE files.

Rank 0 streams the task's curves (`stages.finetune.task_tracking`): train loss, lr and
throughput every `log_every` optimizer steps, and the dev scores after every epoch
(`eval_every_epoch`; always after the last), to metrics.jsonl and the task's wandb run.

loop_config keys (built by `stages.finetune.run.build_loop_config`):
    task, seed:      the task name, the run's seed
    config:          the FinetuneConfig section
    head_config:     head kind, num_labels, task, labels (`model_source.build_task_model`;
                     `save_finetuned` records it)
    source:          where the backbone comes from (`model_source.resolve_model_source`)
    data:            ObjectRef of {"train": EncodedSplit, "dev": ..., "test": ...}
    predict_splits:  the splits predicted after training (default dev and test)
    task_dir:        where rank 0 writes model_outputs.npz and model/
    metrics_log:     object with .log(dict), .read() and .path (the stage's
                     metrics.jsonl), used by rank 0
    scorers:         split -> callable(head outputs (N, k)) -> {metric: score}, the same
                     functions the driver scores with; rank 0 logs "dev_<metric>" (and
                     "test_<metric>" where the test split has labels)
    tracking:        {"experiment", "fingerprint", "task_fingerprint"} for the task's
                     wandb run (optional: without it, metrics.jsonl only)
    primary_metric:  the task's main metric; with finetune.keep_best the epoch with the best
                     dev score on it gives the weights that predict dev and test and are
                     saved (`stages.finetune.best_checkpoint`)
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from stages.finetune.batches import merge_shards, micro_batches_per_epoch, prediction_shard, train_batches
from stages.finetune.encode import EncodedSplit
from stages.finetune.saved_model import save_finetuned
from stages.finetune.task_tracking import open_task_tracker, prefixed

OUTPUTS_NAME = "model_outputs.npz"  # raw head outputs per row, flattened: {"dev": (N, k), ...}
MODEL_DIR = "model"  # see stages.finetune.saved_model


def finetune_worker(loop_config: dict[str, Any]) -> None:
    import ray
    import ray.train

    from stages.finetune.model_source import build_task_model, load_backbone
    from stages.training.checkpoint import report_checkpoint, restore_latest
    from stages.training.deepspeed_config import build_deepspeed_config
    from stages.training.engine import full_fp32_state_dict, initialize_engine
    from stages.training.schedule import WarmupDecaySchedule

    cfg, seed, task = loop_config["config"], loop_config["seed"], loop_config["task"]
    context = ray.train.get_context()
    rank, world_size = context.get_world_rank(), context.get_world_size()
    data: dict[str, EncodedSplit] = ray.get(loop_config["data"])
    train = data["train"]

    # Same seed on every rank: the new head starts identical everywhere.
    torch.manual_seed(seed)
    head = loop_config["head_config"]["head"]
    if loop_config["source"]["family"] == "t5":
        head = "text_to_text"  # labels are target ids (B, L) for every task, never start/end positions
    model = build_task_model(loop_config["head_config"], load_backbone(loop_config["source"]),
                             dropout=cfg.classifier_dropout)
    if loop_config["source"]["family"] == "t5":  # finetune.t5_scoring: rank predicts by label-word likelihood
        from stages.finetune.tasks import get_task
        from stages.finetune.text_to_text.rank import enable_rank_scoring

        enable_rank_scoring(model, get_task(task), cfg, loop_config["source"]["tokenizer"])
    micro_batches = micro_batches_per_epoch(len(train), world_size, cfg.micro_batch_size)
    total_steps = max(1, micro_batches * cfg.epochs // cfg.gradient_accumulation_steps)
    engine = initialize_engine(
        model,
        ds_config=build_deepspeed_config(
            micro_batch_size=cfg.micro_batch_size,
            gradient_accumulation_steps=cfg.gradient_accumulation_steps,
            zero_stage=cfg.zero_stage, gradient_clipping=cfg.grad_clip, precision=cfg.precision),
        lr=cfg.lr, weight_decay=cfg.weight_decay, betas=tuple(cfg.adam_betas),
        schedule=WarmupDecaySchedule(warmup_steps=round(cfg.warmup_fraction * total_steps),
                                     max_steps=total_steps, decay="linear", min_lr_ratio=0.0))

    state = restore_latest(engine)
    first_epoch = 0 if state is None else state["epoch"] + 1
    best = _best_checkpoint(loop_config, fresh_start=state is None, rank=rank)
    if state is None:
        # Per-rank dropout masks: ranks see different rows, so they should not share noise.
        # A restored run keeps the RNG state it was saved with instead.
        torch.manual_seed(seed + 1000 + rank)
    tracker = open_task_tracker(loop_config) if rank == 0 else None
    if tracker is not None:
        tracker.metrics_log.drop_records_after(engine.global_steps)
    scorers = loop_config.get("scorers") or {}
    scores: dict[str, float] = {}  # the latest of every split's scores, "dev_f1": ...

    losses = _LossWindow(tracker, cfg.log_every, engine.device)
    progress = _progress_bar(rank == 0, task, total=micro_batches * cfg.epochs,
                             initial=micro_batches * first_epoch)
    dev_outputs = None
    for epoch in range(first_epoch, cfg.epochs):
        engine.train()
        for positions in train_batches(len(train), micro_batch_size=cfg.micro_batch_size,
                                       epoch=epoch, seed=seed, rank=rank, world_size=world_size):
            lr = engine.get_lr()[0]  # the rate this step's update uses
            loss = engine(**_on_device(_batch(train, positions, head), engine.device))[-1]
            engine.backward(loss)
            boundary = engine.is_gradient_accumulation_boundary()
            engine.step()  # applies the update only at the accumulation boundary
            losses.add(loss.item(), len(positions))
            if boundary:
                losses.maybe_write(engine.global_steps, epoch, lr, last=engine.global_steps == total_steps)
            if progress is not None:
                progress.update()
        if cfg.eval_every_epoch or epoch == cfg.epochs - 1:
            dev_outputs = _predict(engine, data["dev"], cfg.eval_batch_size, rank, world_size)
            # keep_best: every rank scores the same gathered outputs, so all decide alike.
            dev_scores = _score(scorers, {"dev": dev_outputs}) if tracker is not None or best is not None else {}
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

    task_dir = Path(loop_config["task_dir"])
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
    # The last epoch's dev evaluation is the final one (none ran if this run resumed
    # from the last epoch's checkpoint).
    outputs = {split: (dev_outputs if split == "dev" and dev_outputs is not None else
                       _predict(engine, data[split], cfg.eval_batch_size, rank, world_size))
               for split in loop_config.get("predict_splits", ("dev", "test"))}
    if rank == 0:
        _write_npz_atomic(task_dir / OUTPUTS_NAME, outputs)
        if dev_outputs is None:  # resumed after the last epoch: its dev record is logged already
            scores.update(_score(scorers, {"dev": outputs["dev"]}))
        test_scores = _score(scorers, {split: out for split, out in outputs.items() if split != "dev"})
        if test_scores:
            tracker.log(test_scores, step=engine.global_steps)
        scores.update(test_scores)
        if best is not None:
            scores["best_epoch"] = best.best_epoch
        tracker.summary({**scores, "train_examples": len(train), "epochs": cfg.epochs,
                         "steps": engine.global_steps, "num_workers": world_size})
        tracker.finish()
    if cfg.save_model:
        _export_model(engine, loop_config, task_dir / MODEL_DIR, rank, state_dict=best_state)


def _score(scorers: dict, outputs: dict[str, np.ndarray]) -> dict[str, float]:
    """{"dev_accuracy": ..., "test_f1": ...} for the splits that have a scorer."""
    scores: dict[str, float] = {}
    for split, split_outputs in outputs.items():
        if split in scorers:
            scores.update(prefixed(f"{split}_", scorers[split](split_outputs)))
    return scores


def _batch(split: EncodedSplit, positions: np.ndarray, head: str | None = None) -> dict[str, torch.Tensor]:
    """head None: inputs only (prediction); else also that head's labels."""
    batch = {
        "input_ids": torch.from_numpy(split.input_ids[positions].astype(np.int64)),  # (B, T)
        "attention_mask": torch.from_numpy(split.attention_mask[positions].astype(np.int64)),  # (B, T)
    }
    if split.token_type_ids is not None:
        batch["token_type_ids"] = torch.from_numpy(split.token_type_ids[positions].astype(np.int64))  # (B, T)
    if head is not None and split.labels is not None:
        labels = torch.from_numpy(split.labels[positions])
        if head == "span_extraction":  # (B, 2): answer start and end token
            batch["start_positions"], batch["end_positions"] = labels[:, 0], labels[:, 1]
        else:
            batch["labels"] = labels  # (B,) or (B, T)
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


def _best_checkpoint(loop_config: dict[str, Any], *, fresh_start: bool, rank: int):
    """finetune.keep_best: the best dev epoch so far (on disk, so it survives a resume);
    None when the option is off."""
    if not loop_config["config"].keep_best:
        return None
    from stages.finetune.best_checkpoint import BEST_DIR, BestDevCheckpoint

    best = BestDevCheckpoint(Path(loop_config["task_dir"]) / BEST_DIR, loop_config["primary_metric"])
    if fresh_start:
        best.forget(remove=rank == 0)
    dist.barrier()  # nobody writes a new best before rank 0 has removed the old one
    return best


def _export_model(engine, loop_config: dict[str, Any], directory: Path, rank: int,
                  state_dict: dict[str, torch.Tensor] | None = None) -> None:
    """Rank 0 writes the fine-tuned model. Collective, because gathering the weights from
    ZeRO shards (or bf16 master copies) is; written aside and swapped into place, so a
    crash never leaves a half-written model/ behind."""
    from stages.finetune.model_source import build_task_model
    from stages.training.engine import full_fp32_state_dict

    if state_dict is None:  # else the best dev epoch's weights (finetune.keep_best)
        state_dict = full_fp32_state_dict(engine)
    if rank != 0:
        return
    live = engine.module
    # A fresh model that owns its weights (the engine's are views into DeepSpeed buffers).
    model = build_task_model(loop_config["head_config"], type(live.backbone)(live.backbone.config))
    model.load_state_dict(state_dict, strict=True)
    staging = directory.with_name(directory.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    save_finetuned(model, staging, head_config=loop_config["head_config"],
                   tokenizer_path=loop_config["source"]["tokenizer"])
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


def _progress_bar(is_main: bool, task: str, total: int, initial: int):
    if not is_main:
        return None
    from tqdm import tqdm

    # Ray forwards worker output line by line, so redraw rarely.
    return tqdm(total=total, initial=initial, desc=f"finetune {task}", unit="batch", file=sys.stderr,
                mininterval=10.0, ascii=True, dynamic_ncols=False)


class _LossWindow:
    """Mean training loss since the last record, averaged over ranks, written every
    `log_every` optimizer steps and at the last one. Every rank calls `maybe_write` at
    the same steps (it all-reduces, a collective); only rank 0 has a log to write to."""

    def __init__(self, tracker, log_every: int, device: torch.device):
        self.tracker, self.log_every = tracker, log_every
        self.device = device
        self._reset()

    def _reset(self) -> None:
        self.loss_sum, self.batches, self.examples = 0.0, 0, 0
        self.started = time.perf_counter()

    def add(self, loss: float, num_examples: int) -> None:
        self.loss_sum += loss
        self.batches += 1
        self.examples += num_examples

    def maybe_write(self, step: int, epoch: int, lr: float, last: bool) -> None:
        if (step % self.log_every != 0 and not last) or self.batches == 0:
            return
        # On the engine's device: NCCL reduces only GPU tensors (gloo takes either).
        totals = torch.tensor([self.loss_sum, self.batches, self.examples], dtype=torch.float64,
                              device=self.device)
        dist.all_reduce(totals)  # sums over ranks
        seconds = time.perf_counter() - self.started
        if self.tracker is not None:
            self.tracker.log({"epoch": epoch, "loss": float(totals[0] / totals[1]), "lr": lr,
                              "examples_per_s": float(totals[2]) / seconds}, step=step)
        self._reset()
