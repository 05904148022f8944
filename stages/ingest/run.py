"""Ingest: raw corpus files -> cleaned, deduplicated documents in Parquet shards.

Output (read by the tokenizer and dataset stages):

    output_dir/documents/part-00000.parquet ... part-{num_shards-1:05d}.parquet
        id           string  "<source>:<source_line>", stable and unique
        text         string  cleaned document text (UTF-8, normalized, no control chars)
        sentences    list<string>  the text's sentences (stages/ingest/sentences.py); joined
                             with single spaces they give `text` back, up to whitespace
        source       string  the file it came from: relative to data_dir when the config
                             path was relative, otherwise the absolute path or URL
        source_line  int64   1-based line of the file where the document starts (Parquet
                             and Hugging Face sources: 1-based row number)
        metadata     string  JSON object of a record's other fields (JSONL, CSV, Parquet,
                             Hugging Face sources); null for text files and bare records

    Shards are contiguous, byte-balanced runs of the corpus order (sources in config
    order, files sorted by path, documents in file order); a shard may be empty when there
    are fewer documents than shards. A corpus that yields no documents at all (or none
    that pass the filters) is an error naming its sources (empty_input.py); an empty
    file among others is counted (`empty_files`) and named in a warning. Same config and
    data -> the same bytes, with or without Ray.

How: (1) one task per file (per piece of a file larger than ingest.block_size_mb:
split_plan.py; the output is the same bytes) cleans and filters its documents into
output_dir/staging/ and writes next to them what the dedup needs (digests, sizes, and
for near dedup MinHash signatures and LSH band keys; dedup_stage_file.py); (2) the dedup runs as a
hash-partitioned shuffle of tasks (dedup_run.py: per partition, exact duplicates and
near-duplicate candidates; per file, its keep mask), first occurrence in corpus order
wins; (3) one task per shard writes the kept rows, shards planned from per-file totals.
When the driver has started Ray, step (1) is a Ray Data map (ray_data_map.py: one block
per file, as many at once as the cluster has CPUs, rows back in corpus order) and steps
(2) and (3) plain Ray tasks (map_tasks); without Ray all run in this process. The driver
holds per-file and per-partition metadata, nothing per document and never text.

Why Ray Data for step (1) (decision of issue #3, measured with
benchmarks/ingest_ray_data.py: the same clean_file per file, as map_tasks vs as
ray.data.from_items(jobs).map(...), one local Ray with 2 CPUs): it was not slower
(20 books, 19 MB, best of 3: tasks 5.4 s, Ray Data 3.6 s; 40 books: 45 s vs 15 s; the
box was shared and the runs noisy, so read this as "no penalty", not as a speed-up), and
its streaming executor schedules, retries and backpressures the files on a cluster
without code of ours. What kept it out before is solved in ray_data_map.py: a file's
error must reach the user as itself ("file:line: ...", same type and message), but Ray
Data raises RayTaskError(UserCodeException) with the original dropped (and
`raise_original_map_exception` edits the message and logs a Ray "internal" error), so
the worker catches the exception and returns it as the row's outcome, and the driver
raises the first failing file's exception in corpus order, with the worker traceback as
a note. Still not Ray Data: its readers (the unit of work is a file, not a block of
lines: paragraphs span lines, Gutenberg markers and error line numbers are per file, so
Ray Data only schedules our calls), and step (3), which follows the global dedup barrier
and shares map_tasks (stages/ray_tasks.py) with the tokenizer and dataset stages.
"""

from __future__ import annotations

import functools
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from stages.ingest.config import IngestConfig
from stages.ingest.empty_input import (
    check_some_documents_kept,
    check_some_documents_read,
    empty_files,
    empty_files_warning,
)
from stages.ingest.dedup_keep import FileKept
from stages.ingest.dedup_run import deduplicate
from stages.ingest.dedup_stage_file import stage_file
from stages.ingest.ray_data_map import map_in_order
from stages.ingest.sharding import plan_kept_shards, write_shard
from stages.ingest.sources import resolve_sources
from stages.ingest.split_plan import clean_jobs
from stages.ingest.split_results import restage_unreadable, whole_files
from stages.ingest.staging import CleanedFile
from stages.ray_tasks import forget_files, map_tasks, ray_is_up

if TYPE_CHECKING:
    from stages.context import StageContext


def run(ctx: StageContext) -> dict:
    config: IngestConfig = ctx.config
    data_dir = Path(ctx.experiment.data_dir).expanduser().resolve()
    files = resolve_sources(config.sources, data_dir)

    documents_dir = ctx.output_dir / "documents"
    staging_dir = ctx.output_dir / "staging"
    for stale in (documents_dir, staging_dir):  # an interrupted attempt's leftovers
        shutil.rmtree(stale, ignore_errors=True)
        stale.mkdir(parents=True)

    transfer = ctx.node_transfer
    clean_map = functools.partial(map_in_order if ray_is_up() else map_tasks,  # map_tasks: in this process
                                  transfer=transfer)
    jobs = clean_jobs(files, config, staging_dir, clean_map)
    staged = clean_map(stage_file, jobs, desc="ingest: clean files")
    # A split file with an unreadable piece is skipped whole (on_error: skip), as unsplit.
    if redo := restage_unreadable(jobs, [s.summary for s in staged]):
        restaged = clean_map(stage_file, list(redo.values()), desc="ingest: skip files")
        for i, result in zip(redo, restaged, strict=True):
            staged[i] = result
    cleaned = [s.summary for s in staged]  # per piece; in order, pieces add up to files
    per_file = whole_files(jobs, cleaned)
    check_some_documents_read(files, per_file)
    empty = empty_files(files, per_file)
    if (warning := empty_files_warning(files, empty)) is not None:
        print(f"[ingest] warning: {warning}", flush=True)

    staging_paths = [job.staging_path for job in jobs]
    kept = deduplicate(staged, staging_paths, config, str(staging_dir / "dedup"), transfer=transfer)
    # One flag per file stands in for its mask: only "was anything kept" is asked.
    check_some_documents_kept(cleaned, [np.array([k.documents_out > 0]) for k in kept],
                              config.min_chars)
    shard_jobs = plan_kept_shards(staging_paths, [k.documents_out for k in kept],
                                  [k.bytes_out for k in kept], config.num_shards,
                                  str(documents_dir))
    rows = map_tasks(write_shard, shard_jobs, desc="ingest: write shards", transfer=transfer)
    shutil.rmtree(staging_dir)
    forget_files(staging_dir, transfer)  # what tasks elsewhere wrote is in the bucket only: gone at the commit

    num_kept = sum(k.documents_out for k in kept)
    assert sum(rows) == num_kept, f"shards hold {sum(rows)} documents, expected {num_kept}"
    metrics = ingest_metrics(cleaned, kept)
    metrics.update(num_files=len(files), num_shards=len(shard_jobs), empty_files=len(empty))
    ctx.metrics_log.log({"stage": "ingest", **metrics})
    return metrics



def ingest_metrics(cleaned: list[CleanedFile], kept: list[FileKept]) -> dict:
    """Totals, per filter (documents and bytes removed), per source, and a histogram of
    kept document sizes (UTF-8 bytes, power-of-two bins: "<=64", "<=128", ...)."""
    totals = {"documents_in": 0, "documents_out": 0, "bytes_in": 0, "bytes_out": 0}
    per_source: dict[str, dict[str, int]] = {}
    filters: dict[str, dict[str, int]] = {}
    histogram: dict[int, int] = {}
    for f, outcome in zip(cleaned, kept, strict=True):
        numbers = {"documents_in": f.documents_in, "documents_out": outcome.documents_out,
                   "bytes_in": f.bytes_in, "bytes_out": outcome.bytes_out}
        source = per_source.setdefault(f.source_key, dict.fromkeys(numbers, 0))
        for key, value in numbers.items():
            source[key] += value
            totals[key] += value
        for name, (documents, num_bytes) in f.removed.items():
            entry = filters.setdefault(name, {"documents": 0, "bytes": 0})
            entry["documents"] += documents
            entry["bytes"] += num_bytes
        for name, (documents, num_bytes) in (("exact_duplicate", outcome.exact_duplicate),
                                             ("near_duplicate", outcome.near_duplicate)):
            entry = filters.setdefault(name, {"documents": 0, "bytes": 0})
            entry["documents"] += documents
            entry["bytes"] += num_bytes
        for power, count in outcome.histogram.items():
            histogram[power] = histogram.get(power, 0) + count
    duplicates = filters["exact_duplicate"]["documents"] + filters["near_duplicate"]["documents"]
    return {
        **totals,
        "dropped_short": filters.get("min_chars", {}).get("documents", 0),
        "dropped_duplicate": duplicates,
        "duplicate_rate": round(duplicates / max(duplicates + totals["documents_out"], 1), 6),
        "invalid_utf8_replaced": sum(f.invalid_utf8_replaced for f in cleaned),
        "nul_bytes_removed": sum(f.nul_bytes_removed for f in cleaned),
        "skipped_records": sum(f.skipped_records for f in cleaned),
        "skipped_files": sum(f.skipped_files for f in cleaned),
        "gutenberg_lines_stripped": sum(f.gutenberg_lines_stripped for f in cleaned),
        "filters": filters,
        "sources": per_source,
        "length_histogram_bytes": {f"<={2 ** p}": histogram[p] for p in sorted(histogram)},
    }
