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

Resuming: a shard whose files exist was finished by an earlier attempt and is kept; only
the missing shards are built, then index.json is written (last).
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING

from tokenizers import Tokenizer

from stages.data.packed import SPLITS, shard_path, token_dtype, write_index
from stages.data.parallel import map_tasks
from stages.dataset.config import DatasetConfig
from stages.dataset.packing import PackJob, pack_shard, remove_partial_files
from stages.ingest.sharding import document_shards
from stages.tokenizer.run import TOKENIZER_FILE, load_special_tokens

if TYPE_CHECKING:
    from pipeline.context import StageContext


def run(ctx: StageContext) -> dict:
    config: DatasetConfig = ctx.config
    ingest_shards = document_shards(ctx.inputs["ingest"])
    tokenizer_file = ctx.inputs["tokenizer"] / TOKENIZER_FILE
    if not ingest_shards:
        raise FileNotFoundError(
            f"no document shards in {ctx.inputs['ingest']}/documents; re-run the ingest stage")
    vocab_size, eos_id, pad_id = _token_facts(ctx.inputs["tokenizer"])
    dtype = token_dtype(vocab_size)

    for split in SPLITS:
        (ctx.output_dir / split).mkdir(parents=True, exist_ok=True)
    remove_partial_files(ctx.output_dir)
    row_budgets = _train_row_budgets(config, len(ingest_shards))
    jobs = [PackJob(shard, i, tokenizer_file, ctx.output_dir, config.seq_len, dtype, eos_id,
                    config.validation_fraction, ctx.experiment.seed, row_budgets[i])
            for i, shard in enumerate(ingest_shards)]

    start = time.perf_counter()
    packed = map_tasks(pack_shard, jobs, desc="dataset: tokenize and pack")
    seconds = time.perf_counter() - start

    splits = {}
    for split in SPLITS:
        rows = [getattr(p, f"{split}_rows") for p in packed]
        shards = [{"path": shard_path(split, i), "rows": n, "tokens": n * config.seq_len}
                  for i, n in enumerate(rows)]
        splits[split] = {"shards": shards, "rows": sum(rows), "tokens": sum(rows) * config.seq_len}
    if splits["train"]["rows"] == 0:
        raise ValueError(
            f"the train split is empty: the corpus has fewer than seq_len={config.seq_len} "
            f"tokens per ingest shard; lower dataset.seq_len or ingest more text")
    write_index(ctx.output_dir, {
        "objective": config.objective, "seq_len": config.seq_len, "vocab_size": vocab_size,
        "dtype": dtype, "eos_id": eos_id, "pad_id": pad_id, "splits": splits,
    })

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
    ctx.metrics_log.log({"stage": "dataset", **metrics})
    return metrics


def _token_facts(tokenizer_dir) -> tuple[int, int, int | None]:
    """(vocab size, end-of-text id, padding id or None) of a finished tokenizer output."""
    tokenizer = Tokenizer.from_file(str(tokenizer_dir / TOKENIZER_FILE))
    special = load_special_tokens(tokenizer_dir)
    eos_id = tokenizer.token_to_id(special["eos_token"])
    pad_id = tokenizer.token_to_id(special["pad_token"]) if "pad_token" in special else None
    assert eos_id is not None, f"eos token {special['eos_token']!r} is not in the vocabulary"
    return tokenizer.get_vocab_size(), eos_id, pad_id


def _train_row_budgets(config: DatasetConfig, num_shards: int) -> list[int | None]:
    """max_tokens as whole rows, spread evenly over the shards so that the early stop does
    not depend on which task runs first."""
    if config.max_tokens is None:
        return [None] * num_shards
    total_rows = math.ceil(config.max_tokens / config.seq_len)
    return [total_rows // num_shards + (i < total_rows % num_shards) for i in range(num_shards)]
