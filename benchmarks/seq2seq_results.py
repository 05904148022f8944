"""Issue 32's sequence-to-sequence results in one table, each from the real CLI
(`pretrain run`), then decoded and scored from the fine-tuned model it saved.

    .venv/bin/python benchmarks/seq2seq_results.py                                   # the real runs (hours here)
    .venv/bin/python benchmarks/seq2seq_results.py --steps 4 --max-eval-examples 16  # smoke: proves the script only
    .venv/bin/python benchmarks/seq2seq_results.py --only transformer,beam,newstest

Parts (--only):
  transformer  configs/transformer-multi30k.yaml, both directions: test2016 BLEU (beam 4,
               length penalty 0.6, as the stage scores it), dev BLEU, wall time of the run
  smoothing    en->de with label smoothing 0.1 and 0.0, finetune.seed 0 and 1: dev perplexity
               (teacher forced, no smoothing, from the saved model) and test BLEU
  beam         the en->de model (smoothing 0.1, seed 0): test BLEU and sentences/s, beam 4
               with length penalty 0.6 vs greedy, decoded here in batches of 64
  newstest     the same model on WMT newstest2014 en->de (out of domain), beam 4
  pretraining  configs/t5-tiny.yaml (span corruption on the Gutenberg corpus, --t5-pretrain-steps
               steps) fine-tuned on multi30k_en_de, pretrained vs finetune.init: random, same steps
  dialogsum    configs/t5-tiny.yaml fine-tuned on dialogsum: test ROUGE vs the lead (first
               turn) baseline

--steps N sets finetune.max_steps=N for every run (and the T5's pretraining to N steps);
--max-eval-examples M scores M dev/test examples (newstest2014: its first M). Without
them the configs' own budgets run. Every run writes under --workdir (one workdir per
config, so ingest, tokenizer and dataset are reused between runs of the same config).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("WANDB_MODE", "disabled")
REPO_ROOT = Path(__file__).resolve().parents[1]
PARTS = ("transformer", "smoothing", "beam", "newstest", "pretraining", "dialogsum")
TRANSFORMER, T5_TINY = "configs/transformer-multi30k.yaml", "configs/t5-tiny.yaml"
# Without --steps, T5 fine-tuning runs as long as the Transformer's 2 epochs (2 x 227 steps).
T5_FULL_STEPS = 454
# configs/t5-tiny.yaml pretrains for 40 steps (a demo); "pretraining helps?" needs more than
# that to mean anything: --t5-pretrain-steps (default below) in full mode.
T5_PRETRAIN_STEPS = 1500
DECODE_BATCH = 64


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, help="finetune.max_steps of every run (smoke mode)")
    parser.add_argument("--max-eval-examples", type=int, help="dev/test examples scored (smoke mode)")
    parser.add_argument("--only", default=",".join(PARTS), help=f"comma-separated parts of {', '.join(PARTS)}")
    parser.add_argument("--t5-pretrain-steps", type=int, default=T5_PRETRAIN_STEPS,
                        help="pretrain.max_steps of the T5 (span corruption on the corpus) without --steps")
    parser.add_argument("--workdir", type=Path, default=REPO_ROOT / "runs" / "benchmarks" / "seq2seq_results")
    args = parser.parse_args()
    parts = [part for part in args.only.split(",") if part]
    unknown = sorted(set(parts) - set(PARTS))
    if unknown:
        print(f"error: --only: unknown part(s) {', '.join(unknown)}; choose from {', '.join(PARTS)}", file=sys.stderr)
        sys.exit(2)
    rows: list[tuple[str, str, str]] = []  # (result, setting, figure)
    for part in parts:
        rows += globals()[f"part_{part}"](args)
    mode = (f"SMOKE MODE (finetune.max_steps={args.steps}, max_eval_examples={args.max_eval_examples}): "
            "proves the script runs, not the results" if args.steps or args.max_eval_examples else "full budgets")
    print(f"\n### Sequence-to-sequence results (issue 32), {mode}\n")
    print("| result | setting | figure |")
    print("|---|---|---|")
    for result, setting, figure in rows:
        print(f"| {result} | {setting} | {figure} |")
    sys.stdout.flush()


def common_overrides(args, *, t5: bool = False) -> list[str]:
    out = ["finetune.save_model=true", "finetune.max_failures=0"]
    if args.steps:
        out.append(f"finetune.max_steps={args.steps}")
        if t5:
            out += [f"pretrain.max_steps={args.steps}", f"pretrain.checkpoint_every={args.steps}",
                    f"pretrain.eval_every={args.steps}"]
    elif t5:
        steps = args.t5_pretrain_steps
        out += [f"finetune.max_steps={T5_FULL_STEPS}", "finetune.max_train_examples=null",
                f"pretrain.max_steps={steps}", f"pretrain.warmup_steps={max(1, steps // 20)}",
                f"pretrain.checkpoint_every={max(1, steps // 3)}", f"pretrain.eval_every={max(1, steps // 3)}"]
    if args.max_eval_examples:
        out.append(f"finetune.max_eval_examples={args.max_eval_examples}")
    return out


def run_cli(config: str, workdir: Path, overrides: list[str]) -> tuple[dict[str, Path], float]:
    """`pretrain run` with the overrides; returns ({task: its finished folder}, wall seconds).
    A failed run stops the script with the CLI's last lines."""
    command = [sys.executable, "-m", "pipeline.cli", "run", config, "-o", f"workdir={workdir}",
               *(part for key in overrides for part in ("-o", key))]
    print("$", " ".join(command[2:]), flush=True)
    start = time.perf_counter()
    result = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True,
                            env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    seconds = time.perf_counter() - start
    if result.returncode != 0:
        print(result.stdout[-3000:] + result.stderr[-3000:], file=sys.stderr)
        print(f"error: `pretrain run {config}` failed (exit {result.returncode}); its output is above", file=sys.stderr)
        sys.exit(1)
    finetune = workdir / "latest" / "finetune"
    return {task.name: task for task in finetune.iterdir() if (task / "metrics.json").is_file()}, seconds


def metrics_of(task_dir: Path) -> dict:
    return json.loads((task_dir / "metrics.json").read_text())


# The runs each part needs; a run two parts share happens once.
_RUNS: dict[tuple, tuple[dict[str, Path], float]] = {}


def transformer_run(args, *, label_smoothing: float = 0.1, seed: int = 0, both: bool = False):
    key = ("transformer", label_smoothing, seed, both)
    if key not in _RUNS:
        tasks = "[multi30k_en_de,multi30k_de_en]" if both else "[multi30k_en_de]"
        overrides = [f"finetune.tasks={tasks}", f"finetune.label_smoothing={label_smoothing}", f"finetune.seed={seed}",
                     *common_overrides(args)]
        _RUNS[key] = run_cli(TRANSFORMER, args.workdir / "transformer", overrides)
        if both:  # the en->de half is the smoothing-0.1, seed-0 run of the other parts
            _RUNS[("transformer", label_smoothing, seed, False)] = _RUNS[key]
    return _RUNS[key]


def t5_run(args, task: str, init: str):
    key = ("t5", task, init)
    if key not in _RUNS:
        overrides = [f"finetune.tasks=[{task}]", f"finetune.init={init}", *common_overrides(args, t5=True)]
        _RUNS[key] = run_cli(T5_TINY, args.workdir / "t5-tiny", overrides)
    return _RUNS[key]


def bleu(metrics: dict, prefix: str = "test_") -> str:
    low, high = metrics.get(f"{prefix}bleu_ci95_low"), metrics.get(f"{prefix}bleu_ci95_high")
    interval = f" [{low:.1f}, {high:.1f}]" if low is not None and high is not None else ""
    return f"{metrics[f'{prefix}bleu']:.2f}{interval}"


def part_transformer(args) -> list[tuple[str, str, str]]:
    tasks, seconds = transformer_run(args, both=True)
    rows = []
    for task in ("multi30k_en_de", "multi30k_de_en"):
        metrics = metrics_of(tasks[task])
        rows.append((f"Transformer from scratch, {task}", f"{metrics.get('steps')} steps, beam 4 lp 0.6",
                     f"test2016 BLEU {bleu(metrics)} (copy baseline {metrics.get('test_bleu_baseline', float('nan')):.2f}),"
                     f" dev BLEU {metrics['bleu']:.2f}"))
    rows.append(("Transformer from scratch, wall time", "both directions, whole `pretrain run`",
                 f"{seconds / 60:.1f} min"))
    return rows


def part_smoothing(args) -> list[tuple[str, str, str]]:
    rows = []
    for label_smoothing in (0.1, 0.0):
        for seed in (0, 1):
            tasks, _ = transformer_run(args, label_smoothing=label_smoothing, seed=seed)
            task_dir = tasks["multi30k_en_de"]
            ppl = dev_perplexity(task_dir, args)
            rows.append(("Label smoothing, multi30k_en_de", f"eps {label_smoothing}, seed {seed}",
                         f"dev perplexity {ppl:.2f}, test BLEU {bleu(metrics_of(task_dir))}"))
    return rows


def part_beam(args) -> list[tuple[str, str, str]]:
    tasks, _ = transformer_run(args)
    rows = []
    for name, num_beams, length_penalty in (("beam 4, length penalty 0.6", 4, 0.6), ("greedy", 1, 1.0)):
        score, rate = decode_and_score(tasks["multi30k_en_de"], "multi30k_en_de", None, args, num_beams, length_penalty)
        rows.append(("Beam vs greedy, multi30k_en_de test2016", name, f"BLEU {score:.2f}, {rate:.1f} sentences/s"))
    return rows


def part_newstest(args) -> list[tuple[str, str, str]]:
    tasks, _ = transformer_run(args)
    score, rate = decode_and_score(tasks["multi30k_en_de"], "multi30k_en_de", "newstest2014", args, 4, 0.6)
    limit = f"first {args.max_eval_examples} of 3,003" if args.max_eval_examples else "3,003 sentences"
    return [("Out of domain: Multi30k en->de model", f"newstest2014 ({limit}), beam 4 lp 0.6", f"BLEU {score:.2f}")]


def part_pretraining(args) -> list[tuple[str, str, str]]:
    rows = []
    for init in ("pretrained", "random"):
        tasks, _ = t5_run(args, "multi30k_en_de", init)
        metrics = metrics_of(tasks["multi30k_en_de"])
        rows.append(("Pretraining helps? t5-tiny on multi30k_en_de", f"init {init}, {metrics.get('steps')} steps",
                     f"test2016 BLEU {bleu(metrics)}, dev BLEU {metrics['bleu']:.2f}"))
    return rows


def part_dialogsum(args) -> list[tuple[str, str, str]]:
    tasks, _ = t5_run(args, "dialogsum", "pretrained")
    metrics = metrics_of(tasks["dialogsum"])
    # rouge-score gives fractions: shown in points, as BLEU is
    figures = ", ".join(f"{name} {100 * metrics[f'test_{name}']:.1f} "
                        f"(lead {100 * metrics.get(f'test_{name}_baseline', float('nan')):.1f})"
                        for name in ("rouge1", "rouge2", "rougeL") if f"test_{name}" in metrics)
    return [("DialogSum, t5-tiny fine-tuned vs the lead baseline", f"{metrics.get('steps')} steps, test, 3 references",
             figures)]


# --- decoding and scoring the saved model here ---------------------------------------------


def _spec_and_rows(task: str, split: str, args):
    """The task's spec and rows of `split` ("dev", "test", or "newstest2014": WMT14 en->de)."""
    from stages.finetune.seq2seq.reader import read_split
    from stages.finetune.seq2seq.spec import BUILTIN_SEQ2SEQ, SplitFiles

    data_dir = Path(os.environ.get("DATA_DIR", REPO_ROOT.parent / "shared" / "data"))
    spec = BUILTIN_SEQ2SEQ[task]
    if split == "newstest2014":
        spec = spec.model_copy(update={"splits": {**spec.splits, "newstest2014": SplitFiles(
            source="mt/wmt14/newstest2014.en", target="mt/wmt14/newstest2014.de")}})
    rows = read_split(spec, split, data_dir)
    if args.max_eval_examples:
        rows = type(rows)(sources=rows.sources[:args.max_eval_examples],
                          references=rows.references[:args.max_eval_examples])
    return spec, rows


def _model_of(task_dir: Path):
    import torch

    from stages.models import load_pretrained

    torch.set_num_threads(min(2, os.cpu_count() or 1))
    return load_pretrained(task_dir / "model").eval(), str(task_dir / "model" / "tokenizer.json")


def dev_perplexity(task_dir: Path, args) -> float:
    """exp(mean cross-entropy per target token) on dev, teacher forced, no label smoothing."""
    import torch

    from stages.finetune.seq2seq.encode import encode_rows

    model, tokenizer = _model_of(task_dir)
    spec, rows = _spec_and_rows("multi30k_en_de", "dev", args)
    encoded, _ = encode_rows(tokenizer, spec, rows, layout="encoder_decoder", train=True)
    total, tokens = 0.0, 0
    with torch.no_grad():
        for start in range(0, len(rows.sources), DECODE_BATCH):
            ids = torch.as_tensor(encoded.input_ids[start:start + DECODE_BATCH], dtype=torch.long)
            mask = torch.as_tensor(encoded.attention_mask[start:start + DECODE_BATCH], dtype=torch.long)
            labels = torch.as_tensor(encoded.labels[start:start + DECODE_BATCH])
            logits, _ = model(ids, mask, labels=labels)
            total += torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(),
                                                       ignore_index=-100, reduction="sum").item()
            tokens += int((labels != -100).sum())
    return math.exp(total / tokens)


def decode_and_score(task_dir: Path, task: str, split: str | None, args, num_beams: int,
                     length_penalty: float) -> tuple[float, float]:
    """(sacreBLEU BLEU, sentences/s) of the saved model on `split` (default test), at most
    each batch's longest source + 50 tokens, as the stage decodes."""
    import numpy as np
    import sacrebleu
    import torch

    from stages.finetune.seq2seq.encode import encode_rows
    from stages.finetune.seq2seq.scores import hypotheses
    from stages.models.generation import generate_seq2seq

    model, tokenizer = _model_of(task_dir)
    spec, rows = _spec_and_rows(task, split or "test", args)
    encoded, _ = encode_rows(tokenizer, spec, rows, layout="encoder_decoder", train=False)
    eos = model.config.eos_token_id
    outputs = []
    start_time = time.perf_counter()
    for start in range(0, len(rows.sources), DECODE_BATCH):
        mask = torch.as_tensor(encoded.attention_mask[start:start + DECODE_BATCH], dtype=torch.long)
        width = int(mask.sum(1).max())
        ids = torch.as_tensor(encoded.input_ids[start:start + DECODE_BATCH, :width], dtype=torch.long)
        out = generate_seq2seq(model, ids, mask[:, :width], width + 50, num_beams=num_beams,
                               length_penalty=length_penalty, eos_token_id=eos)[:, 1:]
        ended = (out == eos).long()
        out = out.masked_fill(ended.cumsum(1) - ended > 0, -1)  # -1 after the end, as the stage's outputs
        outputs += out.tolist()
    rate = len(rows.sources) / (time.perf_counter() - start_time)
    width = max(len(row) for row in outputs)
    array = np.array([row + [-1] * (width - len(row)) for row in outputs], dtype=np.float32)
    texts = hypotheses(tokenizer, array)
    return sacrebleu.corpus_bleu(texts, [[refs[0] for refs in rows.references]]).score, rate


if __name__ == "__main__":
    main()
