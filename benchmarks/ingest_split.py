"""One large JSONL file through the ingest stage, read whole (one task) vs split into
pieces (ingest.block_size_mb, split_plan.py), on one local Ray with 2 CPUs:

    .venv/bin/python benchmarks/ingest_split.py [--mb 64] [--block-mb 8] [--repeats 1]

The file is made from the Gutenberg books: one JSON record per paragraph, books
concatenated until the file holds --mb MB. Both runs are the whole stage (clean,
dedup, shards); the split run includes its range scans. Also checks that the two runs
write the same shard bytes and metrics.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import ray  # noqa: E402

from pipeline.context import StageContext  # noqa: E402
from stages.ingest.config import IngestConfig  # noqa: E402
from stages.ingest.run import run as run_ingest  # noqa: E402
from stages.ingest.sharding import document_shards  # noqa: E402


def write_corpus(books_dir: Path, path: Path, megabytes: float) -> int:
    """Paragraphs of the books as JSONL records, until the file holds `megabytes` MB."""
    size = 0
    with open(path, "w", encoding="utf-8") as out:
        for n, book in enumerate(sorted(books_dir.glob("*.txt"))):
            text = book.read_text(encoding="utf-8-sig", errors="replace").replace("\r\n", "\n")
            for i, paragraph in enumerate(p for p in text.split("\n\n") if p.strip()):
                line = json.dumps({"text": paragraph, "book": book.name, "n": i}) + "\n"
                out.write(line)
                size += len(line.encode())
            if size >= megabytes * 1e6:
                break
    return size


def ingest(data_dir: Path, output_dir: Path, block_mb: float | None,
           name: str = "corpus.jsonl") -> tuple[float, dict]:
    config = IngestConfig(sources=[{"path": name, "format": "jsonl"}], block_size_mb=block_mb)
    ctx = StageContext(name="ingest", config=config, output_dir=output_dir,
                       experiment=SimpleNamespace(seed=0, data_dir=str(data_dir)))
    start = time.perf_counter()
    metrics = run_ingest(ctx)
    return time.perf_counter() - start, metrics


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data-dir", default=str(REPO.parent / "shared/data"))
    parser.add_argument("--mb", type=float, default=64)
    parser.add_argument("--block-mb", type=float, default=8)
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args()

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": str(REPO)}})
    try:
        with tempfile.TemporaryDirectory() as tmp:
            data_dir = Path(tmp) / "data"
            data_dir.mkdir()
            size = write_corpus(Path(args.data_dir) / "corpus/gutenberg",
                                data_dir / "corpus.jsonl", args.mb)
            # Ray Data's first maps start and import into the workers: not timed.
            (data_dir / "warm-up.jsonl").write_text("".join(
                json.dumps({"text": f"warm-up record number {i} of the benchmark"}) + "\n"
                for i in range(2000)))
            ingest(data_dir, Path(tmp) / "warm-up", 0.01, "warm-up.jsonl")
            best: dict[str, float] = {}
            outputs: dict[str, tuple] = {}
            for repeat in range(args.repeats):
                for name, block in (("whole", None), ("split", args.block_mb)):
                    output_dir = Path(tmp) / f"{name}-{repeat}"
                    seconds, metrics = ingest(data_dir, output_dir, block)
                    best[name] = min(best.get(name, float("inf")), seconds)
                    outputs[name] = (metrics, [p.read_bytes() for p in
                                               document_shards(output_dir)])
            assert outputs["whole"] == outputs["split"], "split output differs from whole"
    finally:
        ray.shutdown()

    megabytes = size / 1e6
    pieces = -(-size // int(args.block_mb * 2**20))
    print(f"one JSONL file, {megabytes:.0f} MB, {outputs['whole'][0]['documents_in']} records; "
          f"split: block {args.block_mb:g} MiB (~{pieces} pieces); 2 CPUs; "
          f"best of {args.repeats}\n")
    print("| ingest stage | seconds | MB/s | vs whole |")
    print("|---|---:|---:|---:|")
    for name in ("whole", "split"):
        print(f"| {name} | {best[name]:.1f} | {megabytes / best[name]:.2f} | "
              f"{best[name] / best['whole']:.2f}x |")


if __name__ == "__main__":
    main()
