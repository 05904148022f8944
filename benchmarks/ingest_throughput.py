"""Ingest throughput (MB/s of input) on the Gutenberg corpus, exact vs near dedup, in one
run, in process (no Ray), plus peak RSS of this process.

    .venv/bin/python benchmarks/ingest_throughput.py [--data-dir ../shared/data]
"""

from __future__ import annotations

import argparse
import resource
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

from pipeline.context import StageContext
from stages.ingest.config import IngestConfig
from stages.ingest.run import run


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data-dir", default=str(Path(__file__).resolve().parents[1].parent
                                                  / "shared/data"))
    parser.add_argument("--copies", type=int, default=1,
                        help="list the corpus this many times as sources (dedup off)")
    args = parser.parse_args()
    rows = []
    for dedup in (["none"] if args.copies > 1 else ["exact", "near"]):
        sources = [{"path": f"corpus/gutenberg{'/.' * i}/*.txt"} for i in range(args.copies)]
        config = IngestConfig(sources=sources, dedup=dedup, num_shards=4)
        with tempfile.TemporaryDirectory() as out:
            start = time.perf_counter()
            metrics = run(StageContext(name="ingest", config=config, output_dir=Path(out),
                                       experiment=SimpleNamespace(seed=0,
                                                                  data_dir=args.data_dir)))
            seconds = time.perf_counter() - start
        rows.append((dedup, metrics["bytes_in"] / 1e6, seconds, metrics["documents_out"],
                     metrics["dropped_duplicate"]))
    print("| dedup | MB in | seconds | MB/s | documents out | duplicates dropped |")
    print("|---|---:|---:|---:|---:|---:|")
    for dedup, mb, seconds, out, dropped in rows:
        print(f"| {dedup} | {mb:.1f} | {seconds:.1f} | {mb / seconds:.2f} | {out} | {dropped} |")
    print(f"peak RSS: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")


if __name__ == "__main__":
    main()
