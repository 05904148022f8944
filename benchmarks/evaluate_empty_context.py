"""Peak memory and seconds of scoring a task whose every request has the same (empty)
context, ours against lm-evaluation-harness's HFLM, on the same model and requests.

    .venv/bin/python benchmarks/evaluate_empty_context.py [--examples 1267] [--batch-size 32]

Such a task (BLiMP's form: each choice scored whole) made our GPT scorer put every request
into one shared-prefix row, before rows were kept to one example's choices and the model's
context: 69,174 tokens for 1,267 examples, a worker of 21 GB killed by Ray's memory monitor. Here: the first
--examples PIQA validation goals, each with its two solutions as one whole sentence
(" {goal} {solution}") after an empty context, so 2 x --examples requests. The model is
the random GPT of evaluate_vs_lm_eval.py (4 layers x 256, context 512, BPE of 8192). Each
side runs in a process of its own, so that its peak resident memory (ru_maxrss) is its
own; the memory reported is that peak, and the growth over the process's memory once the
model is loaded. Log-likelihoods are checked to agree (1e-3 relative) before anything is
reported. Both sides get the same torch threads and batch size.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from benchmarks.evaluate_vs_lm_eval import ARCHITECTURE, TOKENIZER_BOOKS, piqa_docs  # noqa: E402
from stages.evaluate.requests import LoglikelihoodRequest  # noqa: E402
from tests.conftest import DATA_DIR  # noqa: E402
from tests.support.pretrained_dirs import book_paragraphs, write_pretrained  # noqa: E402


def empty_context_requests(num_examples: int) -> list[LoglikelihoodRequest]:
    return [LoglikelihoodRequest(example, choice, "", f" {doc['goal']} {doc[key]}")
            for example, doc in enumerate(piqa_docs()[:num_examples])
            for choice, key in enumerate(("sol1", "sol2"))]


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: kilobytes


def score_one_side(side: str, root: Path, args: argparse.Namespace) -> dict:
    """In this (child) process: load the model, score every request, report."""
    import torch

    torch.set_num_threads(args.threads)
    requests = empty_context_requests(args.examples)
    if side == "ours":
        from stages.evaluate.scorers import load_scorer
        from stages.evaluate.scorers.encoding import encode_pairs

        scorer = load_scorer(root / "model", batch_size=args.batch_size)
        pairs = encode_pairs(scorer.tokenizer, [(r.context, r.continuation) for r in requests], scorer.eot_id)
        rows, _ = scorer.plan_rows(requests, pairs)
        extra = {"rows": len(rows.rows), "longest_row": max(len(row.tokens) for row in rows.rows),
                 # the one row of every request that the scorer built before
                 "unbounded_row": 1 + sum(len(c) - 1 for c in dict.fromkeys(tuple(c) for _, c in pairs))}
        run = lambda: [r.logprob for r in scorer.loglikelihood(requests)]  # noqa: E731
    else:
        from lm_eval.api.instance import Instance
        from lm_eval.models.huggingface import HFLM

        lm = HFLM(pretrained=str(root / "hf"), batch_size=args.batch_size, device="cpu")
        instances = [Instance("loglikelihood", {}, (r.context, r.continuation), i) for i, r in enumerate(requests)]
        extra = {}
        run = lambda: [ll for ll, _ in lm.loglikelihood(instances, disable_tqdm=True)]  # noqa: E731
    loaded = peak_rss_mb()
    start = time.perf_counter()
    logprobs = run()
    seconds = time.perf_counter() - start
    return {"side": side, "requests": len(requests), "seconds": seconds, "peak_mb": peak_rss_mb(),
            "loaded_mb": loaded, "logprobs": logprobs, **extra}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=1267)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--side", choices=["ours", "lm-eval"], help=argparse.SUPPRESS)  # a child's part
    parser.add_argument("--root", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side:
        print(json.dumps(score_one_side(args.side, Path(args.root), args)))
        return

    with tempfile.TemporaryDirectory() as tmp:
        books = sorted((DATA_DIR / "corpus" / "gutenberg").glob("*.txt"))[:TOKENIZER_BOOKS]
        texts = [paragraph for book in books for paragraph in book_paragraphs(10**9, book)]
        root = write_pretrained(Path(tmp), "gpt", ARCHITECTURE, vocab_size=8192, max_seq_len=512, texts=texts)
        results = {}
        for side in ("ours", "lm-eval"):
            child = subprocess.run(
                [sys.executable, __file__, "--side", side, "--root", str(root), "--examples", str(args.examples),
                 "--batch-size", str(args.batch_size), "--threads", str(args.threads)],
                check=True, capture_output=True, text=True)
            results[side] = json.loads(child.stdout.strip().splitlines()[-1])
    ours, theirs = results["ours"], results["lm-eval"]
    worst = max(abs(a - b) / max(1.0, abs(b)) for a, b in zip(ours["logprobs"], theirs["logprobs"], strict=True))
    assert worst < 1e-3, f"log-likelihoods differ by {worst} (relative)"
    print(f"{ours['requests']} requests with an empty context ({args.examples} PIQA goals x 2 solutions), "
          f"threads {args.threads}, batch {args.batch_size}; log-likelihoods agree within {worst:.1e} (relative)")
    print(f"ours: {ours['rows']} rows, the longest {ours['longest_row']} tokens (before, one row of every "
          f"request: {ours['unbounded_row']:,} tokens)\n")
    print("| scorer | seconds | peak memory (MB) | growth while scoring (MB) |")
    print("|---|---|---|---|")
    for name, result in (("ours", ours), ("lm-eval HFLM", theirs)):
        print(f"| {name} | {result['seconds']:.1f} | {result['peak_mb']:.0f} | "
              f"{result['peak_mb'] - result['loaded_mb']:.0f} |")


if __name__ == "__main__":
    main()
