"""Peak RSS of ingest + tokenizer at 1x and 4x the corpus, side by side in one run
(target: at most 1.3x growth), each size in a fresh process, in process (no Ray: the
worst case, every task's memory in one process).

    .venv/bin/python benchmarks/ingest_memory.py [--books 139] [--sizes 1 4]
                                                  [--dedup exact] [--sample-mb 20]

The Nx corpus is N variants of the first --books Gutenberg books written to a temp dir:
copy k prefixes every paragraph with "Copy k." (so exact dedup does not collapse the
copies back to 1x). The child reports VmHWM (its own peak RSS) after imports, after
ingest and after the tokenizer (bpe, 8192, --sample-mb of text: the tokenizer's memory is
bounded by its sample budget, not by the corpus).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

CHILD = """
import json, sys, time
from pathlib import Path
from types import SimpleNamespace
sys.path.insert(0, {repo!r})

def peak_rss_mb():
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmHWM")) / 1024

from pipeline.context import StageContext
from stages.ingest.config import IngestConfig
from stages.ingest.run import run as run_ingest
from stages.tokenizer.config import TokenizerConfig
from stages.tokenizer.run import run as run_tokenizer
args = json.loads(sys.argv[1])
root, report = Path(args["root"]), {{"imports": peak_rss_mb()}}
experiment = SimpleNamespace(seed=0, data_dir=args["data_dir"])
start = time.perf_counter()
ingest = run_ingest(StageContext(
    name="ingest", output_dir=root / "ingest", experiment=experiment,
    config=IngestConfig(sources=[{{"path": "*/*.txt"}}], dedup=args["dedup"], num_shards=4)))
report.update(ingest=peak_rss_mb(), ingest_seconds=time.perf_counter() - start,
              mb_in=ingest["bytes_in"] / 1e6, documents_out=ingest["documents_out"])
(root / "tokenizer").mkdir()
start = time.perf_counter()
run_tokenizer(StageContext(
    name="tokenizer", output_dir=root / "tokenizer", experiment=experiment,
    inputs={{"ingest": root / "ingest"}},
    config=TokenizerConfig(vocab_size=8192, sample_bytes=args["sample_bytes"])))
report.update(tokenizer=peak_rss_mb(), tokenizer_seconds=time.perf_counter() - start)
print(json.dumps(report))
"""


def write_corpus(books: list[Path], copies: int, target: Path) -> None:
    """`copies` variants of the books: in copy k every paragraph starts with "Copy k."."""
    for copy in range(copies):
        folder = target / f"copy{copy}"
        folder.mkdir(parents=True)
        for book in books:
            lines = book.read_text(encoding="utf-8-sig").splitlines()
            varied, blank = [], True
            for line in lines:
                varied.append(f"Copy {copy}. {line}" if blank and line.strip() else line)
                blank = not line.strip()
            (folder / book.name).write_text("\n".join(varied) + "\n", encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data-dir", default=str(REPO.parent / "shared/data"))
    parser.add_argument("--books", type=int, default=139, help="first N Gutenberg books")
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--dedup", default="exact", choices=["exact", "near", "none"])
    parser.add_argument("--sample-mb", type=float, default=20, help="tokenizer.sample_bytes")
    args = parser.parse_args()

    books = sorted((Path(args.data_dir) / "corpus/gutenberg").glob("*.txt"))[:args.books]
    rows = []
    for size in args.sizes:
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            write_corpus(books, size, root / "data")
            start = time.perf_counter()
            done = subprocess.run(
                [sys.executable, "-c", CHILD.format(repo=str(REPO)), json.dumps({
                    "root": str(root), "data_dir": str(root / "data"), "dedup": args.dedup,
                    "sample_bytes": int(args.sample_mb * 1e6)})],
                check=True, capture_output=True, text=True, cwd=REPO)
            report = json.loads(done.stdout.strip().splitlines()[-1])
            report["wall"] = time.perf_counter() - start
            rows.append((size, report))
            print(f"{size}x done in {report['wall']:.0f} s", file=sys.stderr, flush=True)

    base = rows[0][1]["tokenizer"]
    print(f"{len(books)} books; dedup {args.dedup}; tokenizer bpe 8192 on "
          f"{args.sample_mb:g} MB\n")
    print("| corpus | MB in | documents out | ingest s | tokenizer s | RSS after imports MB "
          "| peak RSS after ingest MB | peak RSS after tokenizer MB | growth |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for size, r in rows:
        print(f"| {size}x | {r['mb_in']:.1f} | {r['documents_out']} | {r['ingest_seconds']:.0f} | "
              f"{r['tokenizer_seconds']:.0f} | {r['imports']:.0f} | {r['ingest']:.0f} | "
              f"{r['tokenizer']:.0f} | {r['tokenizer'] / base:.2f}x |")


if __name__ == "__main__":
    main()
