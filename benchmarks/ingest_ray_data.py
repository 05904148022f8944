"""Ray Data or plain Ray tasks for ingest's per-file step (read, clean, filter, stage)?
Both, side by side in one run, on the same files, on one local Ray with 2 CPUs:

    .venv/bin/python benchmarks/ingest_ray_data.py [--books 20] [--repeats 2]

- tasks:    stages.ray_tasks.map_tasks(clean_file, jobs), what the stage does;
- ray.data: ray.data.from_items(jobs).map(clean_file) with preserve_order, the same
            function as a Ray Data map (Ray Data's line readers cannot be used directly:
            paragraphs span lines, Gutenberg markers and error line numbers are per file).

Each run stages into its own temp dir; the best wall time of --repeats is kept (the
machine is shared). Also checks that both stage identical documents.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import pyarrow.parquet as pq  # noqa: E402
import ray  # noqa: E402

from stages.ingest.config import IngestConfig  # noqa: E402
from stages.ingest.sources import resolve_sources  # noqa: E402
from stages.ingest.staging import CleanJob, clean_file  # noqa: E402
from stages.ray_tasks import map_tasks  # noqa: E402


def clean_row(row: dict) -> dict:
    """Ray Data maps rows (dicts): wrap the job and the result."""
    return {"result": clean_file(row["job"])}


def with_tasks(jobs: list[CleanJob]) -> list:
    return map_tasks(clean_file, jobs, desc="tasks")


def with_ray_data(jobs: list[CleanJob]) -> list:
    ray.data.DataContext.get_current().execution_options.preserve_order = True
    dataset = ray.data.from_items([{"job": job} for job in jobs]).map(clean_row)
    return [row["result"] for row in dataset.take_all()]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data-dir", default=str(REPO.parent / "shared/data"))
    parser.add_argument("--books", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    books = sorted((Path(args.data_dir) / "corpus/gutenberg").glob("*.txt"))[:args.books]
    config = IngestConfig(sources=[{"path": str(book)} for book in books])
    files = resolve_sources(config.sources, Path(args.data_dir))
    megabytes = sum(book.stat().st_size for book in books) / 1e6

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": str(REPO)}})
    try:
        best: dict[str, float] = {}
        staged: dict[str, list[bytes]] = {}
        for _ in range(args.repeats):
            for name, run in (("tasks", with_tasks), ("ray.data", with_ray_data)):
                with tempfile.TemporaryDirectory() as tmp:
                    jobs = [CleanJob(f, f"{tmp}/file-{i:06d}.parquet", config)
                            for i, f in enumerate(files)]
                    start = time.perf_counter()
                    cleaned = run(jobs)
                    seconds = time.perf_counter() - start
                    staged[name] = [pq.read_table(c.staging_path).to_pylist() for c in cleaned]
                best[name] = min(best.get(name, float("inf")), seconds)
        assert staged["tasks"] == staged["ray.data"], "the two paths staged different rows"
    finally:
        ray.shutdown()

    print(f"{len(books)} books, {megabytes:.1f} MB; best of {args.repeats}; 2 CPUs\n")
    print("| per-file step on | seconds | MB/s | vs tasks |")
    print("|---|---:|---:|---:|")
    for name in ("tasks", "ray.data"):
        print(f"| {name} | {best[name]:.1f} | {megabytes / best[name]:.2f} | "
              f"{best[name] / best['tasks']:.2f}x |")


if __name__ == "__main__":
    main()
