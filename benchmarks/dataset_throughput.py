"""Dataset stage and loader, side by side with their limits, in one run.

    .venv/bin/python benchmarks/dataset_throughput.py [--books 4] [--repeats 3]

1. build tokens/s (clm, mlm, span) vs raw Tokenizer.encode_batch over the same texts,
   same process, same cores (the tokenizer's own thread pool); each measured --repeats
   times, alternating, best of each (the machine is shared: the best run is the one
   least disturbed), and the CPU seconds each took (all threads; CPU ratio =
   encode_batch's / the build's). The ingest shards carry the `sentences` column, as
   the ingest stage writes them, so mlm pairs sentences split at ingest time;
2. loader examples/s per rank (rank 0 of 2, batch 8) vs what one training step of
   gpt-tiny (2 layers, width 64, seq_len 64, micro batch 8) consumes on this CPU;
Peak RSS as the corpus grows: benchmarks/dataset_memory.py.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
from tokenizers import Tokenizer, models, pre_tokenizers, trainers  # noqa: E402

from pipeline.context import StageContext  # noqa: E402
from stages.data.loader import ExampleLoader  # noqa: E402
from stages.dataset.config import DatasetConfig  # noqa: E402
from stages.dataset.run import run as run_dataset  # noqa: E402
from stages.ingest.sentences import split_sentences  # noqa: E402
from stages.ingest.sharding import document_shards  # noqa: E402
from stages.objectives.registry import build_batch_builder

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "corpus" / "gutenberg"
BOOKS = ["pg7700.txt", "pg1250.txt", "The-Dunwich-Horror.txt", "pg851.txt", "pg7700.txt"]


def make_ingest(root: Path, num_books: int, copies: int = 1) -> Path:
    """Paragraph documents of the first books, as ingest shards (4 per copy)."""
    texts = []
    for name in sorted(p.name for p in DATA.glob("*.txt"))[:num_books]:
        raw = (DATA / name).read_text(encoding="utf-8", errors="replace")
        texts += [" ".join(p.split()) for p in raw.split("\n\n") if len(p.strip()) > 20]
    (root / "documents").mkdir(parents=True)
    per_shard = -(-len(texts) // 4)
    for copy in range(copies):
        for shard in range(4):
            part = texts[shard * per_shard:(shard + 1) * per_shard]
            rows = [{"id": f"{copy}:{shard}:{i}", "text": t, "sentences": split_sentences(t)}
                    for i, t in enumerate(part)]
            pq.write_table(pa.Table.from_pylist(rows),
                           root / "documents" / f"part-{copy * 4 + shard:05d}.parquet")
    return root


def make_tokenizer(root: Path, kind: str, ingest: Path) -> Path:
    texts = [t for p in document_shards(ingest) for t in pq.read_table(p).column("text").to_pylist()]
    if kind == "bpe":
        tok, special = Tokenizer(models.BPE()), ["<|endoftext|>", "<|pad|>"]
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        trainer = trainers.BpeTrainer(vocab_size=8192, special_tokens=special, show_progress=False,
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
        roles = {"eos_token": special[0], "pad_token": special[1]}
    elif kind == "wordpiece":
        tok, special = Tokenizer(models.WordPiece(unk_token="[UNK]")), [
            "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
        tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        trainer = trainers.WordPieceTrainer(vocab_size=8192, special_tokens=special,
                                            show_progress=False)
        roles = {"pad_token": "[PAD]", "cls_token": "[CLS]", "sep_token": "[SEP]",
                 "mask_token": "[MASK]", "unk_token": "[UNK]"}
    else:
        special = ["<pad>", "</s>", "<unk>"] + [f"<extra_id_{i}>" for i in range(100)]
        tok = Tokenizer(models.Unigram())
        tok.pre_tokenizer = pre_tokenizers.Metaspace()
        trainer = trainers.UnigramTrainer(vocab_size=8192, special_tokens=special,
                                          unk_token="<unk>", show_progress=False)
        roles = {"pad_token": "<pad>", "eos_token": "</s>", "unk_token": "<unk>"}
    tok.train_from_iterator(texts, trainer=trainer)
    out = root / f"tok-{kind}"
    out.mkdir()
    tok.save(str(out / "tokenizer.json"))
    (out / "special_tokens_map.json").write_text(json.dumps(roles))
    return out


def build(ingest: Path, tokenizer: Path, out: Path, **options) -> tuple[dict, float]:
    config = DatasetConfig(**options)
    ctx = StageContext(name="dataset", config=config, output_dir=out,
                       inputs={"ingest": ingest, "tokenizer": tokenizer},
                       experiment=SimpleNamespace(seed=0, data_dir="unused"))
    start = time.perf_counter()
    metrics = run_dataset(ctx)
    return metrics, time.perf_counter() - start


def raw_encode(ingest: Path, tokenizer: Path) -> tuple[int, float]:
    tok = Tokenizer.from_file(str(tokenizer / "tokenizer.json"))
    start, tokens = time.perf_counter(), 0
    for shard in document_shards(ingest):
        for batch in pq.ParquetFile(shard).iter_batches(512, columns=["text"]):
            tokens += sum(len(e.ids) for e in tok.encode_batch(batch.column("text").to_pylist(),
                                                               add_special_tokens=False))
    return tokens, time.perf_counter() - start


def cpu_seconds() -> float:
    """CPU time of this process, all its threads (the tokenizer's pool included): the work
    done, which other processes on a shared machine disturb far less than wall time."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def build_throughput(root: Path, ingest: Path, repeats: int) -> list[tuple]:
    rows = []
    for objective, kind, options in [("clm", "bpe", {"seq_len": 128}),
                                     ("mlm", "wordpiece", {"seq_len": 128}),
                                     ("mlm static x1", "wordpiece",
                                      {"seq_len": 128, "mlm": {"masking": "static"}}),
                                     ("span", "unigram", {"seq_len": 512})]:
        tokenizer = make_tokenizer(root, kind, ingest) if not (root / f"tok-{kind}").exists() \
            else root / f"tok-{kind}"
        out = root / f"out-{objective.replace(' ', '-')}"
        raw_times, build_times, raw_cpu, build_cpu = [], [], [], []
        for _ in range(repeats):
            cpu = cpu_seconds()
            raw_tokens, raw_seconds = raw_encode(ingest, tokenizer)
            raw_cpu.append(cpu_seconds() - cpu)
            raw_times.append(raw_seconds)
            shutil.rmtree(out, ignore_errors=True)
            cpu = cpu_seconds()
            metrics, seconds = build(ingest, tokenizer, out,
                                     objective=objective.split()[0], **options)
            build_cpu.append(cpu_seconds() - cpu)
            build_times.append(seconds)
        raw = raw_tokens / min(raw_times)
        ours = raw_tokens / min(build_times)  # the same documents' tokens over the stage's time
        rows.append((objective, kind, raw_tokens, raw, ours, ours / raw, min(raw_cpu),
                     min(build_cpu), metrics["train_rows"]))
    return rows


def loader_throughput(root: Path) -> list[tuple]:
    import torch

    from stages.models.build import build_model
    from stages.objectives.clm.loss import next_token_loss
    model = build_model({"family": "gpt", "num_layers": 2, "hidden_size": 64, "num_heads": 2},
                        2048, 64)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randint(0, 2048, (8, 64))
    for _ in range(3):
        next_token_loss(model(x), x)[0].backward()
    start, steps = time.perf_counter(), 20
    for _ in range(steps):
        optimizer.zero_grad()
        loss = next_token_loss(model(x), x)[0]
        loss.backward()
        optimizer.step()
    step_examples_per_s = 8 * steps / (time.perf_counter() - start)
    rows = []
    for name in ["out-clm", "out-mlm", "out-mlm-static-x1", "out-span"]:
        loader = ExampleLoader(root / name, "train", 8, rank=0, world_size=2, seed=0, batch_builder=build_batch_builder)
        next(loader)
        start, n = time.perf_counter(), 300
        for _ in range(n):
            next(loader)
        per_s = 8 * n / (time.perf_counter() - start)
        rows.append((name[4:], per_s, step_examples_per_s, per_s / step_examples_per_s))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--books", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="dataset-bench-"))
    try:
        ingest = make_ingest(root / "ingest", args.books)
        print("| objective | tokenizer | tokens | encode_batch tok/s | build tok/s | ratio "
              "| encode_batch CPU s | build CPU s | CPU ratio | train rows |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        for r in build_throughput(root, ingest, args.repeats):
            print(f"| {r[0]} | {r[1]} | {r[2]:,} | {r[3]:,.0f} | {r[4]:,.0f} | {r[5]:.2f}x "
                  f"| {r[6]:.2f} | {r[7]:.2f} | {r[6] / r[7]:.2f}x | {r[8]:,} |")
        print("\n| dataset | loader examples/s (rank 0 of 2, batch 8) | gpt-tiny step examples/s | ratio |")
        print("|---|---|---|---|")
        for r in loader_throughput(root):
            print(f"| {r[0]} | {r[1]:,.0f} | {r[2]:,.0f} | {r[3]:.0f}x |")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
