"""Peak memory of the dataset stage as the corpus grows, in one run.

    .venv/bin/python benchmarks/dataset_memory.py [--books 4] [--objectives clm,mlm,span]

For each objective, builds the first --books Gutenberg books (1x) and four copies of
them (4x: four times the documents and shards) with the stage's own code, each build in
a fresh Python process, and reports that process's peak RSS twice: in total, and minus
the build's own peak above the RSS once every module it needs is imported (the peak
RSS counter is reset there). At small sizes the imports dominate the total; the growth
of the second number is what the design's "memory stays flat as the corpus grows" is
about. Target: 4x / 1x at most 1.3.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.dataset_throughput import build, make_ingest, make_tokenizer  # noqa: E402

TOKENIZER_KIND = {"clm": "bpe", "mlm": "wordpiece", "span": "unigram"}
OPTIONS = {"clm": {"seq_len": 128}, "mlm": {"seq_len": 128, "mlm": {"masking": "static"}},
           "span": {"seq_len": 512}}


def peak_rss_mb() -> float:
    """The process's peak RSS since it started."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def status_mb(field: str) -> float:
    """VmRSS (now) or VmHWM (peak since the last reset) from /proc/self/status."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"/proc/self/status has no {field} (this benchmark needs Linux)")


def reset_peak_rss() -> None:
    """Linux >= 4.0: writing 5 to clear_refs resets VmHWM to the current RSS, so that the
    build's own peak is not hidden by a transient peak of the imports."""
    Path("/proc/self/clear_refs").write_text("5")


def child(root: Path, objective: str, copies: int) -> None:
    """In a fresh process: the build alone, then its memory figures as one JSON line."""
    import stages.dataset.run  # noqa: F401  (every import the build makes, before the baseline)
    from tokenizers import Tokenizer
    Tokenizer.from_file(str(root / f"tok-{TOKENIZER_KIND[objective]}" / "tokenizer.json"))
    baseline = status_mb("VmRSS")
    reset_peak_rss()
    metrics, seconds = build(root / f"ingest-x{copies}", root / f"tok-{TOKENIZER_KIND[objective]}",
                             root / f"out-{objective}-x{copies}", objective=objective,
                             **OPTIONS[objective])
    print(json.dumps({"baseline_mb": baseline, "build_peak_mb": status_mb("VmHWM"),
                      "peak_mb": peak_rss_mb(), "seconds": seconds,
                      "train_tokens": metrics["train_tokens"]}))


def measure(root: Path, objective: str, copies: int) -> dict:
    result = subprocess.run(
        [sys.executable, __file__, "--child", str(root), objective, str(copies)],
        capture_output=True, text=True)
    if result.returncode:
        raise RuntimeError(f"the {objective} x{copies} build failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--books", type=int, default=4)
    parser.add_argument("--objectives", default="clm,mlm,span")
    parser.add_argument("--child", nargs=3, metavar=("ROOT", "OBJECTIVE", "COPIES"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(Path(args.child[0]), args.child[1], int(args.child[2]))
        return
    root = Path(tempfile.mkdtemp(prefix="dataset-memory-"))
    try:
        for copies in (1, 4):
            make_ingest(root / f"ingest-x{copies}", args.books, copies=copies)
        print("| objective | corpus | train tokens | build s | peak RSS MB | after imports MB "
              "| peak minus imports MB | growth (total) | growth (minus imports) |")
        print("|---|---|---|---|---|---|---|---|---|")
        for objective in args.objectives.split(","):
            kind = TOKENIZER_KIND[objective]
            if not (root / f"tok-{kind}").exists():
                make_tokenizer(root, kind, root / "ingest-x1")
            one = measure(root, objective, 1)
            for copies, figures in ((1, one), (4, measure(root, objective, 4))):
                own = figures["build_peak_mb"] - figures["baseline_mb"]
                own_one = one["build_peak_mb"] - one["baseline_mb"]
                print(f"| {objective} | {copies}x | {figures['train_tokens']:,} | "
                      f"{figures['seconds']:.1f} | {figures['peak_mb']:.0f} | "
                      f"{figures['baseline_mb']:.0f} | {own:.0f} | "
                      f"{figures['peak_mb'] / one['peak_mb']:.2f}x | {own / own_one:.2f}x |")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
