"""Decoding throughput (sentences/s) of our batched, KV-cached seq2seq decoding
(stages.models.generation.generate_seq2seq, what the finetune stage's seq2seq tasks run)
against transformers' `generate` on the same weights: our T5 converted to a
T5ForConditionalGeneration (stages.models.t5.convert). Beam 4 with length penalty 0.6
(`generate(num_beams=4, length_penalty=0.6, early_stopping=True)`) and greedy, same
batches, same max length.

    .venv/bin/python benchmarks/seq2seq_decoding.py [--sentences 200] [--batch 32] [--train-steps 150] [--repeats 3]

The model: a T5 of the Multi30k config's size (2+2 layers, width 256, 4 heads, d_ff 1024)
over a T5 Unigram vocabulary of --vocab pieces trained on Multi30k's train.en + train.de,
trained for --train-steps steps on en->de pairs (teacher forcing, Adam 1e-3, batch 32), so
that hypotheses end at realistic lengths instead of running to the limit as a random
model's do. The sources: the first --sentences lines of test_2016_flickr.en, in batches
of --batch, right-padded; each batch generates at most --max-new-tokens tokens on both
sides. Calls alternate ours / transformers so that background load hits both alike; the
table has medians and ratio = ours / transformers in sentences/s (above 1: we are faster).
`identical rows`: rows whose tokens up to and including </s> are equal on both sides.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from stages.models import T5, T5Config  # noqa: E402
from stages.models.t5.convert import hf_t5_config, t5_to_hf_t5  # noqa: E402
from stages.models.generation import generate_seq2seq  # noqa: E402
from stages.tokenizer.config import TokenizerConfig  # noqa: E402
from stages.tokenizer.recipes import build_recipe, build_tokenizer, finish_tokenizer  # noqa: E402

DATA = Path(os.environ.get("DATA_DIR", Path(__file__).resolve().parents[2] / "shared" / "data")) / "mt" / "multi30k"
SHAPE = dict(num_layers=2, hidden_size=256, num_heads=4, head_size=64, ff_size=1024)
PAD, EOS = 0, 1  # the T5 Unigram recipe's <pad> and </s>
# transformers warns that early_stopping means nothing to greedy search: beam only.
SETTINGS = {"beam 4, lp 0.6": dict(num_beams=4, length_penalty=0.6), "greedy": dict(num_beams=1)}


def early_stopping(setting: dict) -> dict:
    return {"early_stopping": True} if setting["num_beams"] > 1 else {}


def lines(name: str, n: int | None = None) -> list[str]:
    text = (DATA / name).read_text(encoding="utf-8").splitlines()
    return text[:n] if n else text


def train_tokenizer(vocab: int):
    recipe = build_recipe(TokenizerConfig(kind="unigram", vocab_size=vocab))
    tokenizer = build_tokenizer(recipe)
    tokenizer.train_from_iterator(lines("train.en") + lines("train.de"), trainer=recipe.trainer)
    return finish_tokenizer(tokenizer, recipe)


def padded(rows: list[list[int]], max_len: int = 64) -> tuple[torch.Tensor, torch.Tensor]:
    rows = [row[:max_len] for row in rows]
    width = max(len(row) for row in rows)
    ids = torch.tensor([row + [PAD] * (width - len(row)) for row in rows])
    return ids, (ids != PAD).long()


def train_briefly(model: T5, tokenizer, steps: int, batch: int = 32) -> float:
    """Teacher-forced en->de steps; returns the last loss."""
    sources, targets = lines("train.en"), lines("train.de")
    generator = torch.Generator().manual_seed(0)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    model.train()
    loss = torch.tensor(float("nan"))
    for _ in range(steps):
        picked = torch.randint(len(sources), (batch,), generator=generator).tolist()
        ids, mask = padded([tokenizer.encode(sources[i]).ids for i in picked])
        labels, _ = padded([tokenizer.encode(targets[i]).ids for i in picked])
        labels = labels.masked_fill(labels == PAD, -100)
        _, loss = model(ids, mask, labels=labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    return loss.item()


def up_to_eos(ids: torch.Tensor) -> list[list[int]]:
    """Rows without the start token, up to and including the first </s> (the two pad
    finished rows differently: ours with <pad>, transformers with </s>)."""
    return [row[:row.index(EOS) + 1] if EOS in row else row for row in ids[:, 1:].tolist()]


def decode_all(call, batches) -> tuple[float, list[list[int]]]:
    start = time.perf_counter()
    rows = []
    for ids, mask in batches:
        rows += up_to_eos(call(ids, mask))
    return time.perf_counter() - start, rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sentences", type=int, default=200)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--train-steps", type=int, default=150)
    parser.add_argument("--vocab", type=int, default=8000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    import transformers

    torch.set_num_threads(min(2, os.cpu_count() or 1))
    started = time.perf_counter()
    tokenizer = train_tokenizer(args.vocab)
    torch.manual_seed(0)
    config = T5Config(vocab_size=tokenizer.get_vocab_size(), dropout=0.0, pad_token_id=PAD, eos_token_id=EOS,
                      decoder_start_token_id=PAD, **SHAPE)
    ours = T5(config)
    loss = train_briefly(ours, tokenizer, args.train_steps)
    theirs = transformers.T5ForConditionalGeneration(transformers.T5Config(**hf_t5_config(config))).eval()
    theirs.load_state_dict(t5_to_hf_t5(ours.state_dict(), config))
    print(f"tokenizer + {args.train_steps} training steps: {time.perf_counter() - started:.0f} s, "
          f"last loss {loss:.2f}, vocabulary {config.vocab_size}")

    encoded = [tokenizer.encode(line).ids for line in lines("test_2016_flickr.en", args.sentences)]
    batches = [padded(encoded[i:i + args.batch]) for i in range(0, len(encoded), args.batch)]
    n = len(encoded)
    rows = []
    for name, setting in SETTINGS.items():
        def ours_call(ids, mask, setting=setting):
            return generate_seq2seq(ours, ids, mask, args.max_new_tokens, eos_token_id=EOS, **setting)

        def theirs_call(ids, mask, setting=setting):
            with torch.no_grad():
                return theirs.generate(input_ids=ids, attention_mask=mask, max_new_tokens=args.max_new_tokens,
                                       eos_token_id=EOS, pad_token_id=PAD, decoder_start_token_id=PAD,
                                       do_sample=False, **setting, **early_stopping(setting))

        times = {"ours": [], "transformers": []}
        outputs = {}
        for _ in range(args.repeats):  # alternate, so that background load hits both alike
            for side, call in (("ours", ours_call), ("transformers", theirs_call)):
                seconds, outputs[side] = decode_all(call, batches)
                times[side].append(seconds)
        same = sum(a == b for a, b in zip(outputs["ours"], outputs["transformers"]))
        mean_len = statistics.mean(len(row) for row in outputs["ours"])
        ours_rate, theirs_rate = (n / statistics.median(times[side]) for side in ("ours", "transformers"))
        rows.append((name, ours_rate, theirs_rate, same, mean_len))

    print(f"\n{n} Multi30k test2016 sources, batch {args.batch}, at most {args.max_new_tokens} new tokens, "
          f"median of {args.repeats}, {torch.get_num_threads()} threads, torch {torch.__version__}, "
          f"transformers {transformers.__version__}\n")
    print("| decoding | ours (sent/s) | transformers (sent/s) | ratio | identical rows | mean tokens out |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, ours_rate, theirs_rate, same, mean_len in rows:
        print(f"| {name} | {ours_rate:.1f} | {theirs_rate:.1f} | {ours_rate / theirs_rate:.2f} | {same}/{n} "
              f"| {mean_len:.1f} |")


if __name__ == "__main__":
    main()
