"""Ingest: raw corpus files -> cleaned, deduplicated documents in Parquet shards.

Output (read by the tokenizer and dataset stages):

    output_dir/documents/part-00000.parquet ... part-{num_shards-1:05d}.parquet
        id           string  "<source>:<source_line>", stable and unique
        text         string  cleaned document text (UTF-8, normalized, no control chars)
        source       string  the file it came from: relative to data_dir when the config
                             path was relative, otherwise the absolute path or URL
        source_line  int64   1-based line of the file where the document starts

    Shards are contiguous, byte-balanced runs of the corpus order (sources in config
    order, files sorted by path, documents in file order); an empty corpus still gets
    `num_shards` (empty) files. Same config and data -> the same bytes, with or without Ray.

How: (1) one task per file cleans and filters its documents into output_dir/staging/
and returns a digest per document; (2) the driver drops exact duplicates, first
occurrence in corpus order wins; (3) one task per shard writes the kept rows. Tasks run
on Ray when the driver has started it, in this process otherwise.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from stages.data.parallel import map_tasks
from stages.ingest.config import IngestConfig
from stages.ingest.sharding import keep_masks, plan_shards, write_shard
from stages.ingest.sources import resolve_sources
from stages.ingest.staging import CleanJob, clean_file

if TYPE_CHECKING:
    from pipeline.context import StageContext


def run(ctx: StageContext) -> dict:
    config: IngestConfig = ctx.config
    data_dir = Path(ctx.experiment.data_dir).expanduser().resolve()
    files = resolve_sources(config.sources, data_dir)

    documents_dir = ctx.output_dir / "documents"
    staging_dir = ctx.output_dir / "staging"
    for stale in (documents_dir, staging_dir):  # an interrupted attempt's leftovers
        shutil.rmtree(stale, ignore_errors=True)
        stale.mkdir(parents=True)

    jobs = [CleanJob(file, str(staging_dir / f"file-{i:06d}.parquet"), config.normalization,
                     config.unwrap_lines, config.min_chars) for i, file in enumerate(files)]
    cleaned = map_tasks(clean_file, jobs, desc="ingest: clean files")

    masks = keep_masks(cleaned, dedup=config.dedup == "exact")
    shard_jobs = plan_shards(cleaned, masks, config.num_shards, str(documents_dir))
    rows = map_tasks(write_shard, shard_jobs, desc="ingest: write shards")
    shutil.rmtree(staging_dir)

    kept = sum(int(m.sum()) for m in masks)
    assert sum(rows) == kept, f"shards hold {sum(rows)} documents, expected {kept}"
    metrics = {
        "num_files": len(files),
        "documents_in": sum(f.documents_in for f in cleaned),
        "documents_out": kept,
        "bytes_in": sum(f.bytes_in for f in cleaned),
        "bytes_out": sum(int(f.text_bytes[m].sum()) for f, m in zip(cleaned, masks, strict=True)),
        "dropped_short": sum(f.dropped_short for f in cleaned),
        "dropped_duplicate": sum(f.num_documents for f in cleaned) - kept,
        "invalid_utf8_replaced": sum(f.invalid_utf8_replaced for f in cleaned),
        "num_shards": len(shard_jobs),
    }
    ctx.metrics_log.log({"stage": "ingest", **metrics})
    return metrics

