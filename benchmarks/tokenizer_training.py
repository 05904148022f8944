"""Tokenizer stage vs the raw `tokenizers` trainer on the same text, for each kind, in one
run: wall time (target: stage <= 1.15x raw) and peak RSS, each side in a fresh process.

    .venv/bin/python benchmarks/tokenizer_training.py [--books 139] [--sample-mb 50]
                                                       [--vocab-size 32768] [--repeats 1]
                                                       [--kinds bpe wordpiece unigram]

The Gutenberg books are ingested once (in process, exact dedup). The stage side runs
`stages.tokenizer.run.train_tokenizer` as the stage does (seeded sampling from the
Parquet shards, training, canonical form, files written, fertility on held-out text).
The raw side gets exactly the texts the stage sampled, one document per line in a plain
file, and calls `Tokenizer.train([file], trainer)` (the trainer reads the file in Rust)
with the same model, normalizer, pre-tokenizer and trainer settings. Each side times
itself from after its imports, wall clock and CPU (process_time: every thread of the
process; on a shared machine the CPU ratio is the steadier one); its peak RSS is its own
VmHWM (imports included).
With --repeats N, the two sides alternate N times and the best of each is kept (the
machine is shared: the best run is the least disturbed).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from pipeline.context import StageContext  # noqa: E402
from stages.ingest.config import IngestConfig  # noqa: E402
from stages.ingest.run import run as run_ingest  # noqa: E402
from stages.ingest.sharding import document_shards  # noqa: E402
from stages.tokenizer.config import TokenizerConfig  # noqa: E402
from stages.tokenizer.sample import TrainingSample  # noqa: E402

KINDS = ("bpe", "wordpiece", "unigram")

# VmHWM, not ru_maxrss: Linux carries ru_maxrss over fork + exec, so a child would report
# this (parent) process's peak if that is higher; VmHWM belongs to the new address space.
PEAK_RSS = """
def peak_rss_mb():
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmHWM")) / 1024
"""

# Each side is a fresh interpreter: its imports, its work, then one JSON line.
STAGE_SIDE = PEAK_RSS + """
import json, sys, time
from pathlib import Path
sys.path.insert(0, {repo!r})
from stages.tokenizer.config import TokenizerConfig
from stages.tokenizer.run import TrainJob, train_tokenizer
args = json.loads(sys.argv[1])
job = TrainJob(TokenizerConfig(**args["config"]), [Path(p) for p in args["shards"]], 0,
               Path(args["out"]))
start, cpu_start = time.perf_counter(), time.process_time()
metrics = train_tokenizer(job)
seconds, cpu = time.perf_counter() - start, time.process_time() - cpu_start
print(json.dumps({{"seconds": seconds, "cpu": cpu, "rss_mb": peak_rss_mb(),
                  "vocab_size": metrics["vocab_size"]}}))
"""

RAW_SIDE = PEAK_RSS + """
import json, sys, time
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers
args = json.loads(sys.argv[1])
kind, vocab, min_frequency = args["kind"], args["vocab_size"], args["min_frequency"]
start, cpu_start = time.perf_counter(), time.process_time()
if kind == "bpe":
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab, min_frequency=min_frequency, show_progress=False,
        special_tokens=["<|endoftext|>", "<|pad|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
elif kind == "wordpiece":
    tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    trainer = trainers.WordPieceTrainer(
        vocab_size=vocab, min_frequency=min_frequency, show_progress=False,
        special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"])
else:
    tokenizer = Tokenizer(models.Unigram())
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
    trainer = trainers.UnigramTrainer(
        vocab_size=vocab - 100, show_progress=False, unk_token="<unk>",
        special_tokens=["<pad>", "</s>", "<unk>"])
tokenizer.train([args["text_file"]], trainer=trainer)
tokenizer.save(args["out"])
seconds, cpu = time.perf_counter() - start, time.process_time() - cpu_start
print(json.dumps({"seconds": seconds, "cpu": cpu, "rss_mb": peak_rss_mb(),
                  "vocab_size": tokenizer.get_vocab_size()}))
"""


def run_side(code: str, args: dict) -> dict:
    done = subprocess.run([sys.executable, "-c", code, json.dumps(args)], check=True,
                          capture_output=True, text=True, cwd=REPO)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data-dir", default=str(REPO.parent / "shared/data"))
    parser.add_argument("--books", type=int, default=139, help="first N Gutenberg books")
    parser.add_argument("--sample-mb", type=float, default=50, help="tokenizer.sample_bytes")
    parser.add_argument("--vocab-size", type=int, default=32768)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--kinds", nargs="+", default=list(KINDS), choices=KINDS)
    args = parser.parse_args()

    books = sorted((Path(args.data_dir) / "corpus/gutenberg").glob("*.txt"))[:args.books]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        run_ingest(StageContext(
            name="ingest", output_dir=root / "ingest",
            config=IngestConfig(sources=[{"path": str(book)} for book in books], num_shards=4),
            experiment=SimpleNamespace(seed=0, data_dir=args.data_dir)))
        shards = [str(p) for p in document_shards(root / "ingest")]
        sample_bytes = int(args.sample_mb * 1e6)
        # The texts the stage trains on (same shards, budget and seed), for the raw side.
        sample = TrainingSample([Path(p) for p in shards], sample_bytes, seed=0)
        text_file = root / "sample.txt"
        with open(text_file, "w", encoding="utf-8") as stream:
            for batch in sample:
                stream.writelines(text.replace("\n", " ") + "\n" for text in batch)
        print(f"{len(books)} books; training text: {sample.bytes_used / 1e6:.1f} MB; "
              f"vocab {args.vocab_size}; best of {args.repeats}\n")

        print("| kind | stage s | raw s | wall ratio | stage CPU s | raw CPU s | CPU ratio "
              "| stage peak RSS MB | raw peak RSS MB | vocab |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for kind in args.kinds:
            config = TokenizerConfig(kind=kind, vocab_size=args.vocab_size,
                                     sample_bytes=sample_bytes)
            stage_runs, raw_runs = [], []
            for _ in range(args.repeats):
                stage_runs.append(run_side(STAGE_SIDE.format(repo=str(REPO)), {
                    "config": config.model_dump(), "shards": shards,
                    "out": str(root / f"stage-{kind}")}))
                raw_runs.append(run_side(RAW_SIDE, {
                    "kind": kind, "vocab_size": args.vocab_size,
                    "min_frequency": config.min_frequency, "text_file": str(text_file),
                    "out": str(root / f"raw-{kind}.json")}))
            stage = min(stage_runs, key=lambda r: r["seconds"])
            raw = min(raw_runs, key=lambda r: r["seconds"])
            stage_cpu = min(r["cpu"] for r in stage_runs)
            raw_cpu = min(r["cpu"] for r in raw_runs)
            print(f"| {kind} | {stage['seconds']:.1f} | {raw['seconds']:.1f} | "
                  f"{stage['seconds'] / raw['seconds']:.2f}x | {stage_cpu:.1f} | {raw_cpu:.1f} | "
                  f"{stage_cpu / raw_cpu:.2f}x | {stage['rss_mb']:.0f} | "
                  f"{raw['rss_mb']:.0f} | {stage['vocab_size']} / {raw['vocab_size']} |",
                  flush=True)


if __name__ == "__main__":
    main()
