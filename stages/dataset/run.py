"""Dataset: ingested documents + tokenizer -> packed training rows for one objective.

Output (read by pretrain through `stages.data.loader.PackedSequenceLoader`; the format
is documented in `stages.data.packed`):

    output_dir/index.json
    output_dir/train/shard-00000.arrow ...        one per ingest shard
    output_dir/validation/shard-00000.arrow ...   column input_ids: fixed_size_list<uint16>[seq_len]

Objective clm: every document is followed by the end-of-text token; a split's token
stream is cut into rows of exactly seq_len tokens (the model shifts the labels inside a
row). Documents, not rows, are split between train and validation, so no text is in
both. Shard i packs ingest shard i, one task each (Ray tasks when the driver has started
Ray); the bytes do not depend on the parallelism.

Objectives mlm (BERT pairs, static or dynamic masking) and span (T5 span corruption) are
built by the same code with other writers (stages.objectives); their index.json also holds
the special token ids, the settings the loader needs, and per-split stats.

dataset.mixture (several sources, each with a weight): one such dataset per part, in
`output_dir/<name>/`, and a top-level index.json over all of them that names the parts
and their weights (stages/dataset/mixture.py); pretraining mixes them by weight
(stages/data/mixing.py).

Resuming: a shard whose files exist was finished by an earlier attempt and is kept; only
the missing shards are built, then index.json is written (last).

Why Ray tasks (stages.ray_tasks) and not Ray Data: the unit of work is a whole
ingest shard that reads one Parquet file and writes its own two Arrow files, so there
is no stream of blocks between operators for Ray Data to pipeline or back-pressure, and
keeping finished shards on a rerun is a file check per task. A `ray.data.from_items(jobs)
.map(pack_shard)` over the same jobs gave the same rows and was not faster: mlm, 8
shards, 2 CPUs, best of 5 on this shared machine, 4.2 s against 3.5 s for the tasks
(and 17 s against 12 s for the first, cold call). Memory is flat either way: each task
streams its shard in batches of documents (benchmarks/dataset_memory.py).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from stages.data.packed import SPLITS, shard_path, token_dtype, write_index
from stages.dataset.config import DatasetConfig
from stages.dataset.mixture import mixture_index, plan_mixture
from stages.dataset.packing import PackJob, pack_shard, remove_partial_files
from stages.dataset.stats import StatsJob, split_stats_of
from stages.ingest.sharding import document_shards
from stages.objectives.base import WriterSpec
from stages.objectives.registry import objective_named
from stages.ray_tasks import map_tasks, map_where_files_are
from stages.tokenizer.output import TOKENIZER_FILE, resolve_token_ids

if TYPE_CHECKING:
    from stages.context import StageContext


def run(ctx: StageContext) -> dict:
    config: DatasetConfig = ctx.config
    ingest_shards = document_shards(ctx.inputs["ingest"], ctx.input_manifests.get("ingest"))
    tokenizer_file = ctx.inputs["tokenizer"] / TOKENIZER_FILE
    if not ingest_shards:
        raise FileNotFoundError(
            f"no document shards in {ctx.inputs['ingest']}/documents; re-run the ingest stage")
    ids = resolve_token_ids(ctx.inputs["tokenizer"], config.objective)
    dtype = token_dtype(ids.vocab_size)
    objective = objective_named(config.objective)
    spec = WriterSpec(objective, config.seq_len, dtype, ids, objective.index_entries(config, ids))

    unmatched: list[str] = []
    if config.mixture:
        plans, unmatched = plan_mixture(config.mixture, ingest_shards)
        targets = [_Target(ctx.output_dir / plan.name, plan.shards, plan.sources, plan.name)
                   for plan in plans]
        if unmatched:
            print(f"[dataset] warning: no dataset.mixture part matches {len(unmatched)} "
                  f"ingested file(s), left out: {', '.join(unmatched[:5])}"
                  f"{' ...' if len(unmatched) > 5 else ''}", flush=True)
    else:
        targets = [_Target(ctx.output_dir, tuple(enumerate(ingest_shards)))]

    jobs: list[PackJob] = []
    for target in targets:
        for split in SPLITS:
            (target.output_dir / split).mkdir(parents=True, exist_ok=True)
        remove_partial_files(target.output_dir)
        row_budgets = _train_row_budgets(config, len(target.shards))
        jobs += [PackJob(shard, i, tokenizer_file, target.output_dir, spec,
                         config.validation_fraction, ctx.experiment.seed, row_budgets[k],
                         target.sources)
                 for k, (i, shard) in enumerate(target.shards)]

    start = time.perf_counter()
    packed = map_tasks(pack_shard, jobs, desc="dataset: tokenize and pack", transfer=ctx.node_transfer)
    seconds = time.perf_counter() - start

    per_target, done = [], 0
    for target in targets:
        per_target.append(packed[done:done + len(target.shards)])
        done += len(target.shards)
    for target, results in zip(targets, per_target, strict=True):
        if sum(p.train_rows for p in results) == 0:
            part = f" of dataset.mixture part {target.name!r}" if target.name else ""
            raise ValueError(
                f"the train split{part} is empty: the corpus has fewer than seq_len={config.seq_len} "
                f"tokens per ingest shard; lower dataset.seq_len or ingest more text")
    all_stats = _targets_stats(targets, spec, ctx.node_transfer)
    indexes, stats = [], []
    for target, results, target_stats in zip(targets, per_target, all_stats, strict=True):
        index = _target_index(target, results, spec, target_stats)
        write_index(target.output_dir, index)
        indexes.append(index)
        stats.append(target_stats)
    if config.mixture:
        index = mixture_index(plans, indexes)
        write_index(ctx.output_dir, index)
    splits = index["splits"]

    tokens_encoded = sum(p.tokens_encoded for p in packed)
    metrics = {
        "train_rows": splits["train"]["rows"],
        "train_tokens": splits["train"]["tokens"],
        "validation_rows": splits["validation"]["rows"],
        "validation_tokens": splits["validation"]["tokens"],
        "tokens_per_second": round(tokens_encoded / seconds, 1) if tokens_encoded else 0.0,
        "resumed_shards": sum(p.resumed for p in packed),
        "dtype": dtype,
    }
    if config.mixture:
        metrics["unmatched_files"] = len(unmatched)
        metrics["mixture"] = {
            target.name: {"weight": plan.weight, **_split_metrics(part_index["splits"]),
                          **_stats_metrics(part_stats)}
            for target, plan, part_index, part_stats in zip(targets, plans, indexes, stats, strict=True)}
    else:
        metrics.update(_stats_metrics(stats[0]))
    ctx.metrics_log.log({"stage": "dataset", **metrics})
    return metrics


@dataclass(frozen=True)
class _Target:
    """One dataset to build: the whole corpus, or one part of dataset.mixture."""
    output_dir: Path
    shards: tuple[tuple[int, Path], ...]  # (ingest shard index, path)
    sources: frozenset[str] | None = None
    name: str | None = None


def _targets_stats(targets: list[_Target], spec: WriterSpec, transfer) -> list[dict]:
    """Per target, per split, its statistics, read back from the finished shards by tasks
    where the shards are (stages.ray_tasks.map_where_files_are); clm's need no reading."""
    jobs = [StatsJob(target.output_dir, tuple(target.output_dir / shard_path(split, i) for i, _ in target.shards),
                     spec.objective.name, spec.seq_len, spec.ids.pad, spec.ids.sentinels)
            for target in targets for split in SPLITS]
    if not spec.objective.reads_stats:
        results = [split_stats_of(job) for job in jobs]
    else:
        results = map_where_files_are(split_stats_of, jobs, desc="dataset: split statistics", transfer=transfer)
    return [dict(zip(SPLITS, results[k * len(SPLITS):(k + 1) * len(SPLITS)], strict=True))
            for k in range(len(targets))]


def _target_index(target: _Target, packed: list, spec: WriterSpec, stats: dict) -> dict:
    """The index.json of one built dataset, with its per-split `stats`."""
    seq_len, ids = spec.seq_len, spec.ids
    splits = {}
    for split in SPLITS:
        shards = [{"path": shard_path(split, i), "rows": getattr(p, f"{split}_rows"),
                   "tokens": getattr(p, f"{split}_rows") * seq_len}
                  for (i, _), p in zip(target.shards, packed, strict=True)]
        rows = sum(shard["rows"] for shard in shards)
        splits[split] = {"shards": shards, "rows": rows, "tokens": rows * seq_len}
    index = {
        "objective": spec.objective.name, "seq_len": seq_len, "vocab_size": ids.vocab_size,
        "dtype": spec.dtype, "eos_id": ids.eos, "pad_id": ids.pad, "splits": splits,
    }
    if spec.entries:  # clm has none: its index stays as it was (byte-identical outputs)
        index.update(spec.entries, stats=stats)
    return index


def _split_metrics(splits: dict) -> dict:
    return {f"{split}_{key}": splits[split][key] for split in SPLITS for key in ("rows", "tokens")}


def _stats_metrics(stats: dict) -> dict:
    return {f"{split}_{key}": value for split in SPLITS for key, value in stats[split].items()}


def _train_row_budgets(config: DatasetConfig, num_shards: int) -> list[int | None]:
    """max_tokens as whole rows, spread evenly over the shards so that the early stop does
    not depend on which task runs first."""
    if config.max_tokens is None:
        return [None] * num_shards
    total_rows = math.ceil(config.max_tokens / config.seq_len)
    return [total_rows // num_shards + (i < total_rows % num_shards) for i in range(num_shards)]
