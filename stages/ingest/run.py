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

How: (1) one task per file cleans and filters its documents into output_dir/staging/
and returns a digest per document (and, for near dedup, writes MinHash signatures and LSH
band keys next to it); (2) the driver drops exact duplicates (one sort of the digests),
then near-duplicates (lsh.py, one sort per band), first occurrence in corpus order wins;
(3) one task per shard writes the kept rows. When the driver has started Ray, step (1) is
a Ray Data map (ray_data_map.py: one block per file, as many at once as the cluster has
CPUs, rows back in corpus order) and step (3) plain Ray tasks (map_tasks); without Ray
both run in this process. The driver holds tens of bytes per document (digest, size,
masks, and a sort of the digests), never text.

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
from stages.ingest.lsh import near_duplicate_masks
from stages.ingest.ray_data_map import map_in_order
from stages.ingest.sharding import keep_masks, plan_shards, write_shard
from stages.ingest.sources import resolve_sources
from stages.ingest.staging import CleanedFile, CleanJob, clean_file
from stages.ray_tasks import map_tasks, ray_is_up

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

    jobs = [CleanJob(file, str(staging_dir / f"file-{i:06d}.parquet"), config)
            for i, file in enumerate(files)]
    clean_map = map_in_order if ray_is_up() else map_tasks  # map_tasks: in this process
    cleaned = clean_map(clean_file, jobs, desc="ingest: clean files")
    check_some_documents_read(files, cleaned)
    empty = empty_files(files, cleaned)
    if (warning := empty_files_warning(files, empty)) is not None:
        print(f"[ingest] warning: {warning}", flush=True)

    exact = keep_masks(cleaned, dedup=config.dedup != "none")
    masks = exact
    if config.dedup == "near":
        masks = near_duplicate_masks(cleaned, exact, config.minhash_bands,
                                     config.minhash_threshold)
    check_some_documents_kept(cleaned, masks, config.min_chars)
    shard_jobs = plan_shards(cleaned, masks, config.num_shards, str(documents_dir))
    rows = map_tasks(write_shard, shard_jobs, desc="ingest: write shards")
    shutil.rmtree(staging_dir)

    kept = sum(int(m.sum()) for m in masks)
    assert sum(rows) == kept, f"shards hold {sum(rows)} documents, expected {kept}"
    metrics = ingest_metrics(cleaned, exact, masks)
    metrics.update(num_files=len(files), num_shards=len(shard_jobs), empty_files=len(empty))
    ctx.metrics_log.log({"stage": "ingest", **metrics})
    return metrics



def ingest_metrics(cleaned: list[CleanedFile], exact: list[np.ndarray],
                   masks: list[np.ndarray]) -> dict:
    """Totals, per filter (documents and bytes removed), per source, and a histogram of
    kept document sizes (UTF-8 bytes, power-of-two bins: "<=64", "<=128", ...)."""
    totals = {"documents_in": 0, "documents_out": 0, "bytes_in": 0, "bytes_out": 0}
    per_source: dict[str, dict[str, int]] = {}
    filters: dict[str, dict[str, int]] = {}
    histogram: dict[int, int] = {}
    for f, exact_mask, mask in zip(cleaned, exact, masks, strict=True):
        kept_sizes = f.text_bytes[mask]
        numbers = {"documents_in": f.documents_in, "documents_out": int(mask.sum()),
                   "bytes_in": f.bytes_in, "bytes_out": int(kept_sizes.sum())}
        source = per_source.setdefault(f.source_key, dict.fromkeys(numbers, 0))
        for key, value in numbers.items():
            source[key] += value
            totals[key] += value
        for name, (documents, num_bytes) in f.removed.items():
            entry = filters.setdefault(name, {"documents": 0, "bytes": 0})
            entry["documents"] += documents
            entry["bytes"] += num_bytes
        for name, removed in (("exact_duplicate", ~exact_mask), ("near_duplicate", exact_mask & ~mask)):
            entry = filters.setdefault(name, {"documents": 0, "bytes": 0})
            entry["documents"] += int(removed.sum())
            entry["bytes"] += int(f.text_bytes[removed].sum())
        bins = np.maximum(6, np.ceil(np.log2(np.maximum(kept_sizes, 1))).astype(int))
        for power, count in zip(*np.unique(bins, return_counts=True), strict=True):
            histogram[int(power)] = histogram.get(int(power), 0) + int(count)
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
