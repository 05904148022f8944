"""Requests per second of our GPT scorer against lm-evaluation-harness's HFLM on the same
model and the same requests: PIQA-shaped multiple choice (loglikelihood) and rolling
perplexity over real text (loglikelihood_rolling).

    .venv/bin/python benchmarks/evaluate_vs_lm_eval.py [--examples 500] [--text-kb 50] [--repeats 3]

The model is a random GPT (4 layers x 256, 4 heads, context 512) with a byte-level BPE
tokenizer of 8192 tokens trained by our recipe, written as the pretrain stage writes it
(`model/` for us, `hf/` for HFLM). Requests: the first --examples PIQA validation goals,
each with its two solutions, as lm-eval's piqa task builds them ("Question: {goal}\\nAnswer:"
+ " {solution}"); the same for --fewshot-examples with 5 solved examples before each
question (GPT-3's few-shot format: long shared contexts); and --text-kb of a Gutenberg
book as 10 documents. Both sides get the same torch threads and batch size; runs
alternate (ours, lm-eval, ours, ...) and the best of --repeats is kept. Results are checked to agree (1e-3) before timing is reported.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402

from stages.evaluate.requests import LoglikelihoodRequest, RollingRequest  # noqa: E402
from stages.evaluate.scorers import load_scorer  # noqa: E402
from tests.conftest import DATA_DIR  # noqa: E402
from tests.support.pretrained_dirs import book_paragraphs, write_pretrained  # noqa: E402

ARCHITECTURE = {"num_layers": 4, "hidden_size": 256, "num_heads": 4}
TOKENIZER_BOOKS = 8  # about 3 MB: enough text for all 8192 tokens
ROLLING_BOOK = DATA_DIR / "corpus" / "gutenberg" / "pg7700.txt"


def piqa_docs() -> list[dict]:
    piqa = DATA_DIR / "eval" / "piqa"
    labels = (piqa / "valid-labels.lst").read_text().split()
    with open(piqa / "valid.jsonl", encoding="utf-8") as lines:
        return [{**json.loads(line), "label": int(label)} for line, label in zip(lines, labels, strict=True)]


def piqa_requests(num_examples: int, num_shots: int = 0) -> list[LoglikelihoodRequest]:
    """lm-eval's piqa prompt; with shots, each example's context starts with num_shots solved
    examples (taken from the end of the file, never the evaluated ones), joined by blank lines."""
    docs = piqa_docs()
    demos = docs[-num_shots:] if num_shots else []
    prefix = "".join(f"Question: {d['goal']}\nAnswer: {d['sol1'] if d['label'] == 0 else d['sol2']}\n\n"
                     for d in demos)
    requests = []
    for example, doc in enumerate(docs[:num_examples]):
        context = f"{prefix}Question: {doc['goal']}\nAnswer:"
        requests += [LoglikelihoodRequest(example, choice, context, f" {doc[key]}")
                     for choice, key in enumerate(("sol1", "sol2"))]
    return requests


def rolling_requests(text_kb: int, num_documents: int = 10) -> list[RollingRequest]:
    text = " ".join(book_paragraphs(text_kb * 1000, ROLLING_BOOK))
    size = len(text) // num_documents
    return [RollingRequest(i, text[i * size:(i + 1) * size]) for i in range(num_documents)]


def timed(call) -> tuple[float, object]:
    start = time.perf_counter()
    result = call()
    return time.perf_counter() - start, result


def build_workloads(ours, theirs, args: argparse.Namespace) -> dict[str, tuple[list, Callable, Callable]]:
    """name -> (requests, run ours, run lm-eval); each run returns one log-likelihood per request."""
    from lm_eval.api.instance import Instance

    def loglikelihood(requests: list[LoglikelihoodRequest]):
        instances = [Instance("loglikelihood", {}, (r.context, r.continuation), i) for i, r in enumerate(requests)]
        return (requests, lambda: [r.logprob for r in ours.loglikelihood(requests)],
                lambda: [logprob for logprob, _ in theirs.loglikelihood(instances, disable_tqdm=True)])

    documents = rolling_requests(args.text_kb)
    instances = [Instance("loglikelihood_rolling", {}, (r.text,), i) for i, r in enumerate(documents)]
    return {
        "loglikelihood (PIQA, 0-shot)": loglikelihood(piqa_requests(args.examples)),
        "loglikelihood (PIQA, 5-shot)": loglikelihood(piqa_requests(args.fewshot_examples, 5)),
        "loglikelihood_rolling": (documents, lambda: [r.logprob for r in ours.loglikelihood_rolling(documents)],
                                  lambda: theirs.loglikelihood_rolling(instances, disable_tqdm=True)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=500)
    parser.add_argument("--fewshot-examples", type=int, default=100, help="examples of the 5-shot workload")
    parser.add_argument("--text-kb", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    from lm_eval.models.huggingface import HFLM

    with tempfile.TemporaryDirectory() as tmp:
        books = sorted((DATA_DIR / "corpus" / "gutenberg").glob("*.txt"))[:TOKENIZER_BOOKS]
        texts = [paragraph for book in books for paragraph in book_paragraphs(10**9, book)]
        root = write_pretrained(Path(tmp), "gpt", ARCHITECTURE, vocab_size=8192, max_seq_len=512, texts=texts)
        ours = load_scorer(root / "model", batch_size=args.batch_size)
        theirs = HFLM(pretrained=str(root / "hf"), batch_size=args.batch_size, device="cpu")
        print(f"threads {torch.get_num_threads()}, batch {args.batch_size}, best of {args.repeats}, "
              f"vocabulary {ours.tokenizer.get_vocab_size()}, torch {torch.__version__}\n")
        print("| workload | requests | ours (req/s) | lm-eval HFLM (req/s) | ratio (ours / lm-eval) |")
        print("|---|---|---|---|---|")
        for name, (requests, run_ours, run_theirs) in build_workloads(ours, theirs, args).items():
            best = {"ours": float("inf"), "theirs": float("inf")}
            for _ in range(args.repeats):  # alternating, so that background load hits both alike
                seconds, ours_values = timed(run_ours)
                best["ours"] = min(best["ours"], seconds)
                seconds, their_values = timed(run_theirs)
                best["theirs"] = min(best["theirs"], seconds)
            worst = max(abs(a - b) / max(1.0, abs(b)) for a, b in zip(ours_values, their_values, strict=True))
            assert worst < 1e-3, f"{name}: results differ by {worst} (relative)"
            ours_rate, their_rate = len(requests) / best["ours"], len(requests) / best["theirs"]
            print(f"| {name} | {len(requests)} | {ours_rate:.1f} | {their_rate:.1f} | {ours_rate / their_rate:.2f} |")


if __name__ == "__main__":
    main()
