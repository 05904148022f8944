"""The pretraining loop that every Ray Train worker runs (worker side of the stage).

One optimizer step = gradient_accumulation_steps micro batches of micro_batch_size
sequences on each of world_size workers. The loop resumes from the last committed
checkpoint (model, optimizer, lr schedule, data position, RNG), so a killed run that is
started again continues exactly where its checkpoint left off.

Rank 0 writes metrics.jsonl, shows the progress bar and exports the final model; every
rank takes part in evaluation and checkpointing, which are collective.
"""

from __future__ import annotations

import math
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from stages.data.loader import PackedSequenceLoader
from stages.models import build_model, save_pretrained
from stages.pretrain.config import PretrainConfig
from stages.training.checkpoint import report_checkpoint, restore_latest
from stages.training.deepspeed_config import build_deepspeed_config
from stages.training.engine import full_fp32_state_dict, initialize_engine, optimizer_step
from stages.training.schedule import WarmupDecaySchedule
from stages.tracking import open_tracker


def train_loop_per_worker(loop_config: dict[str, Any]) -> None:
    """loop_config (built by stages/pretrain/run.py):
    pretrain: PretrainConfig as a dict; seed; dataset_dir; tokenizer_path; output_dir;
    seq_len, vocab_size (from the dataset's index.json);
    metrics_log (rank 0's JSONL sink), experiment (the ExperimentConfig, for wandb
    tracking), fingerprint (tags the wandb run)."""
    import ray.train

    cfg = PretrainConfig.model_validate(loop_config["pretrain"])
    context = ray.train.get_context()
    rank, world_size = context.get_world_rank(), context.get_world_size()
    seed = loop_config["seed"]
    output_dir = Path(loop_config["output_dir"])
    is_main = rank == 0

    # Same seed on every rank: identical initial weights (DeepSpeed also broadcasts them).
    torch.manual_seed(seed)
    model = build_model(cfg.model, vocab_size=loop_config["vocab_size"], max_seq_len=loop_config["seq_len"])
    num_parameters = model.num_parameters()
    engine = initialize_engine(
        model,
        ds_config=build_deepspeed_config(
            micro_batch_size=cfg.micro_batch_size,
            gradient_accumulation_steps=cfg.gradient_accumulation_steps,
            zero_stage=cfg.zero_stage,
            gradient_clipping=cfg.gradient_clipping,
            precision=cfg.precision,
        ),
        lr=cfg.lr,
        weight_decay=cfg.weight_decay,
        betas=tuple(cfg.adam_betas),
        schedule=WarmupDecaySchedule(
            warmup_steps=cfg.warmup_steps, max_steps=cfg.max_steps,
            decay=cfg.lr_decay, min_lr_ratio=cfg.min_lr_ratio,
        ),
    )
    # Endless (epoch after epoch, reshuffled per epoch); its state is one global position.
    train_loader = PackedSequenceLoader(
        loop_config["dataset_dir"], "train", cfg.micro_batch_size, rank, world_size, seed, shuffle=True
    )

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

    # Append-only: after a resume, the steps between the checkpoint and the crash appear
    # twice in metrics.jsonl; readers keep the last record per step.
    tracker = open_tracker(
        experiment=loop_config["experiment"], stage="pretrain",
        fingerprint=loop_config["fingerprint"], output_dir=output_dir,
        config=loop_config["pretrain"], metrics_log=loop_config["metrics_log"]) if is_main else None

    sequences_per_step = cfg.micro_batch_size * cfg.gradient_accumulation_steps * world_size
    tokens_per_step = sequences_per_step * loop_config["seq_len"]
    progress = _progress_bar(is_main, cfg.max_steps, step)
    train_seconds, steps_this_session = 0.0, 0
    interval_seconds, interval_losses = 0.0, []
    last_metrics: dict[str, Any] = {}
    engine.train()
    while step < cfg.max_steps:
        started = time.perf_counter()
        lr = engine.get_lr()[0]  # the rate this step's update uses
        step_loss = 0.0
        for _ in range(cfg.gradient_accumulation_steps):
            input_ids = next(train_loader).to(engine.device)  # (B, T) int64
            _, loss = engine(input_ids, labels=input_ids)
            engine.backward(loss)
            # Updates only at the accumulation boundary (the last micro batch).
            grad_norm = optimizer_step(engine)
            step_loss += loss.item() / cfg.gradient_accumulation_steps
        step += 1
        elapsed = time.perf_counter() - started
        train_seconds += elapsed
        interval_seconds += elapsed
        steps_this_session += 1
        interval_losses.append(step_loss)
        if progress is not None:
            progress.update(1)
            progress.set_postfix(loss=f"{step_loss:.3f}", refresh=False)

        record: dict[str, Any] = {}
        if step % cfg.log_every == 0 or step == cfg.max_steps:
            record.update(
                step=step,
                loss=_mean_across_ranks(sum(interval_losses) / len(interval_losses), engine.device),
                lr=lr,
                grad_norm=grad_norm,
                tokens_per_s=tokens_per_step * len(interval_losses) / interval_seconds,
            )
            interval_seconds, interval_losses = 0.0, []
        if step % cfg.eval_every == 0 or step == cfg.max_steps:
            val_loss = evaluate(engine, loop_config, cfg, rank, world_size)
            record.update(step=step, val_loss=val_loss, val_perplexity=_perplexity(val_loss))
        if record:
            last_metrics.update(record)
            if tracker is not None:
                tracker.log(record, step=step)

        if step == cfg.max_steps:
            _export_model(engine, loop_config, output_dir, is_main)
        if step % cfg.checkpoint_every == 0 or step == cfg.max_steps:
            summary = {
                "steps": step,
                "final_loss": last_metrics.get("loss"),
                "val_loss": last_metrics.get("val_loss"),
                "val_perplexity": last_metrics.get("val_perplexity"),
                "tokens_per_second": tokens_per_step * steps_this_session / max(train_seconds, 1e-9),
                "num_parameters": num_parameters,
                "resumed_from_step": resumed_from_step,
            }
            report_checkpoint(engine, step, {"loader": train_loader.state_dict()}, summary)
    if progress is not None:
        progress.close()
    if tracker is not None:
        tracker.summary(last_metrics)
        tracker.finish()

    if steps_this_session == 0:
        # Resumed from the final checkpoint: the run had finished, but the driver died
        # before the engine recorded it. Export again (cheap) in case model/ is missing;
        # every rank must take part, so this does not depend on what one rank sees.
        _export_model(engine, loop_config, output_dir, is_main)


@torch.no_grad()
def evaluate(engine, loop_config: dict, cfg: PretrainConfig, rank: int, world_size: int) -> float:
    """Mean next-token loss over the first eval_batches validation batches per rank (all
    of the split if it is smaller), weighted by token count and averaged across ranks.
    A fresh unshuffled loader each time, so every evaluation scores the same rows."""
    engine.eval()
    loader = PackedSequenceLoader(
        loop_config["dataset_dir"], "validation", cfg.micro_batch_size, rank, world_size,
        loop_config["seed"], shuffle=False, drop_last=False,
    )
    # On the engine's device: NCCL reduces only GPU tensors (gloo takes either).
    totals = torch.zeros(2, dtype=torch.float64, device=engine.device)  # (sum of token losses, token count)
    for _ in range(min(cfg.eval_batches, len(loader))):  # the loader is endless
        input_ids = next(loader).to(engine.device)  # (B, T); B may be smaller, even 0, in the last batch
        rows = input_ids.size(0)
        if rows == 0:
            # Still run a forward pass: under ZeRO-3 it gathers parameters collectively,
            # and a rank that skipped it would leave the others waiting.
            input_ids = torch.zeros(1, loop_config["seq_len"], dtype=torch.long, device=engine.device)
        _, loss = engine(input_ids, labels=input_ids)
        num_targets = rows * (input_ids.size(1) - 1)  # a row's first token is never a target
        if num_targets:
            totals += torch.tensor([loss.item() * num_targets, num_targets], dtype=torch.float64,
                                   device=engine.device)
    dist.all_reduce(totals)
    engine.train()
    if totals[1] == 0:
        raise RuntimeError(
            f"the validation split of {loop_config['dataset_dir']} is empty; the dataset stage "
            "must write validation rows (dataset.validation_fraction)"
        )
    return float((totals[0] / totals[1]).item())


def _export_model(engine, loop_config: dict, output_dir: Path, is_main: bool) -> None:
    """Rank 0 writes output_dir/model (weights, config, tokenizer.json). Collective,
    because gathering sharded weights is; the swap into place is atomic per directory."""
    state_dict = full_fp32_state_dict(engine)
    if not is_main:
        return
    model = build_model(loop_config["pretrain"]["model"], vocab_size=loop_config["vocab_size"],
                        max_seq_len=loop_config["seq_len"])
    model.load_state_dict(state_dict, strict=True)
    staging, final = output_dir / "model.partial", output_dir / "model"
    shutil.rmtree(staging, ignore_errors=True)
    save_pretrained(model, staging)
    shutil.copy2(loop_config["tokenizer_path"], staging / "tokenizer.json")
    shutil.rmtree(final, ignore_errors=True)
    os.replace(staging, final)


def _mean_across_ranks(value: float, device: torch.device) -> float:
    tensor = torch.tensor([value], dtype=torch.float64, device=device)
    dist.all_reduce(tensor)
    return float(tensor.item() / dist.get_world_size())


def _perplexity(loss: float) -> float:
    return math.exp(min(loss, 50.0))  # exp overflows past ~709; 50 is already meaningless


def _progress_bar(is_main: bool, total: int, initial: int):
    if not is_main:
        return None
    from tqdm import tqdm

    # Ray forwards worker output line by line, so redraw rarely.
    return tqdm(total=total, initial=initial, desc="pretrain", unit="step", file=sys.stderr,
                mininterval=10.0, ascii=True, dynamic_ncols=False)
