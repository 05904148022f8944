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
built by the same code with other writers (objectives.py); their index.json also holds
the special token ids, the settings the loader needs, and per-split stats.

Resuming: a shard whose files exist was finished by an earlier attempt and is kept; only
the missing shards are built, then index.json is written (last).

Why Ray tasks (stages.data.parallel) and not Ray Data: the unit of work is a whole
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
from typing import TYPE_CHECKING


from stages.data.packed import SPLITS, shard_path, token_dtype, write_index
from stages.data.parallel import map_tasks
from stages.dataset.config import DatasetConfig
from stages.dataset.objectives import ObjectiveSpec, TokenIds, span_lengths
from stages.dataset.packing import PackJob, pack_shard, remove_partial_files
from stages.dataset.stats import split_stats
from stages.dataset.tokens import resolve_token_ids
from stages.ingest.sharding import document_shards
from stages.tokenizer.run import TOKENIZER_FILE

if TYPE_CHECKING:
    from pipeline.context import StageContext


def run(ctx: StageContext) -> dict:
    config: DatasetConfig = ctx.config
    ingest_shards = document_shards(ctx.inputs["ingest"])
    tokenizer_file = ctx.inputs["tokenizer"] / TOKENIZER_FILE
    if not ingest_shards:
        raise FileNotFoundError(
            f"no document shards in {ctx.inputs['ingest']}/documents; re-run the ingest stage")
    ids = resolve_token_ids(ctx.inputs["tokenizer"], config.objective)
    vocab_size, eos_id, pad_id = ids.vocab_size, ids.eos, ids.pad
    dtype = token_dtype(vocab_size)
    spec = ObjectiveSpec(config.objective, config, dtype, ids)

    for split in SPLITS:
        (ctx.output_dir / split).mkdir(parents=True, exist_ok=True)
    remove_partial_files(ctx.output_dir)
    row_budgets = _train_row_budgets(config, len(ingest_shards))
    jobs = [PackJob(shard, i, tokenizer_file, ctx.output_dir, spec,
                    config.validation_fraction, ctx.experiment.seed, row_budgets[i])
            for i, shard in enumerate(ingest_shards)]

    start = time.perf_counter()
    packed = map_tasks(pack_shard, jobs, desc="dataset: tokenize and pack")
    seconds = time.perf_counter() - start

    splits, stats = {}, {}
    for split in SPLITS:
        rows = [getattr(p, f"{split}_rows") for p in packed]
        shards = [{"path": shard_path(split, i), "rows": n, "tokens": n * config.seq_len}
                  for i, n in enumerate(rows)]
        splits[split] = {"shards": shards, "rows": sum(rows), "tokens": sum(rows) * config.seq_len}
        stats[split] = split_stats(ctx.output_dir, shards, config.objective, config.seq_len,
                                   pad_id, ids.sentinels)
    if splits["train"]["rows"] == 0:
        raise ValueError(
            f"the train split is empty: the corpus has fewer than seq_len={config.seq_len} "
            f"tokens per ingest shard; lower dataset.seq_len or ingest more text")
    index = {
        "objective": config.objective, "seq_len": config.seq_len, "vocab_size": vocab_size,
        "dtype": dtype, "eos_id": eos_id, "pad_id": pad_id, "splits": splits,
    }
    if config.objective != "clm":  # clm's index stays as it was (byte-identical outputs)
        index.update(_objective_index(config, ids), stats=stats)
    write_index(ctx.output_dir, index)

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
    for split in SPLITS:
        metrics.update({f"{split}_{key}": value for key, value in stats[split].items()})
    ctx.metrics_log.log({"stage": "dataset", **metrics})
    return metrics


def _objective_index(config: DatasetConfig, ids: TokenIds) -> dict:
    """What the loader needs to turn stored columns into a batch (dynamic masks, decoder
    inputs), so that it never needs the tokenizer."""
    special = {"cls_id": ids.cls, "sep_id": ids.sep, "mask_id": ids.mask,
               "special_ids": list(ids.special)}
    if config.objective == "mlm":
        mlm = config.mlm.model_dump(mode="json")
        if config.mlm.whole_word_masking:
            mlm["continuation_ids"] = list(ids.continuation)
        return {"special": special, "mlm": mlm}
    raw_length, targets_length = span_lengths(config)
    return {"special": special, "span": {
        **config.span.model_dump(mode="json"), "raw_length": raw_length,
        "targets_length": targets_length, "sentinel_ids": list(ids.sentinels)}}


def _train_row_budgets(config: DatasetConfig, num_shards: int) -> list[int | None]:
    """max_tokens as whole rows, spread evenly over the shards so that the early stop does
    not depend on which task runs first."""
    if config.max_tokens is None:
        return [None] * num_shards
    total_rows = math.ceil(config.max_tokens / config.seq_len)
    return [total_rows // num_shards + (i < total_rows % num_shards) for i in range(num_shards)]
