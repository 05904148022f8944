"""Correctness anchor 3 of the fine-tuning suite: does the pipeline's pretraining help?

    .venv/bin/python benchmarks/finetune_pretrained_vs_random.py                      # demo config, small budget
    .venv/bin/python benchmarks/finetune_pretrained_vs_random.py --run-dir runs/demo  # reuse a finished run
    .venv/bin/python benchmarks/finetune_pretrained_vs_random.py -o pretrain.max_steps=1000 --budget full
    .venv/bin/python benchmarks/finetune_pretrained_vs_random.py --run-dir RUN --lrs 1e-4,3e-4,1e-3

Pretrains a tiny GPT through the pipeline (ingest -> tokenizer -> dataset -> pretrain of
--config, default configs/demo.yaml, on the shared Gutenberg corpus; stages already
finished in the workdir are reused), or takes the pretrain stage of a finished run
(--run-dir). Then fine-tunes SST-2 and CoNLL-2003 twice with the finetune stage itself,
same data, hyperparameters and seed: from the pretrained weights, and from the same
model freshly initialised (same config, same tokenizer, the model's own init), at each
fine-tuning learning rate of --lrs. Prints every score, then each side's best over the lr
grid (the BERT paper's protocol: pick the fine-tuning lr on dev, for both sides alike, since
a pretrained model and a random one want different rates); the claim is pretrained >
random on both tasks.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path

os.environ.setdefault("WANDB_MODE", "disabled")
REPO_ROOT = Path(__file__).resolve().parents[1]
TASKS = ("sst2", "conll2003")
PRIMARY = {"sst2": "accuracy", "conll2003": "f1"}
# Per budget: overrides of --config for pretraining (ignored with --run-dir), and the
# finetune keys of both fine-tuning runs (lr: the stage default 5e-4, for tiny models).
PRETRAIN_BUDGETS = {
    "smoke": ["pretrain.max_steps=50"],
    "small": ["pretrain.max_steps=1500", "dataset.max_tokens=4000000"],
    "full": ["pretrain.max_steps=6000", "dataset.max_tokens=16000000"],
}
FINETUNE_BUDGETS = {
    "smoke": dict(max_train_examples=64, max_eval_examples=64, epochs=1, max_seq_len=48),
    "small": dict(max_train_examples=2000, max_eval_examples=None, epochs=2, max_seq_len=64),
    "full": dict(max_train_examples=None, max_eval_examples=None, epochs=3, max_seq_len=128),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default=str(REPO_ROOT / "configs" / "demo.yaml"))
    parser.add_argument("-o", "--override", action="append", default=[], help="KEY=VALUE for --config")
    parser.add_argument("--run-dir", type=Path, help="a finished run's workdir: reuse its pretrain stage")
    parser.add_argument("--budget", choices=sorted(FINETUNE_BUDGETS), default="small")
    parser.add_argument("--lrs", default=None,
                        help="comma-separated fine-tuning learning rates (default: the config's finetune.lr)")
    parser.add_argument("--output", type=Path,
                        default=REPO_ROOT / "runs" / "benchmarks" / "finetune_pretrained_vs_random")
    args = parser.parse_args()

    import ray

    from pipeline.config import load_config

    overrides = [*PRETRAIN_BUDGETS[args.budget], *args.override]  # the user's -o win
    if args.run_dir is None:  # pretrain in a workdir of our own, never in someone's run
        overrides.append(f"workdir={args.output / 'pipeline'}")
    cfg = load_config(args.config, overrides)
    ray.init(num_cpus=2, log_to_driver=False, runtime_env={"env_vars": {"PYTHONPATH": str(REPO_ROOT)}})
    pretrained = args.run_dir.resolve() if args.run_dir else None
    pretrain_dir = finished_pretrain_dir(pretrained) if pretrained else pretrain_through_pipeline(cfg)
    random_dir = write_random_init(pretrain_dir / "model", args.output / "random-init", seed=cfg.seed)
    settings = {**FINETUNE_BUDGETS[args.budget], "tasks": list(TASKS), "save_model": False, "max_failures": 0}
    model_len = json.loads((pretrain_dir / "model" / "model_config.json").read_text())["max_seq_len"]
    settings["max_seq_len"] = min(settings["max_seq_len"], model_len)
    lrs = [float(lr) for lr in args.lrs.split(",")] if args.lrs else [cfg.finetune.lr]
    scores = {(name, lr): finetune(cfg, source_dir, args.output / args.budget / f"{name}-lr{lr:g}",
                                   {**settings, "lr": lr})
              for lr in lrs for name, source_dir in (("pretrained", pretrain_dir), ("random", random_dir))}
    print_table(scores, lrs, settings, pretrain_dir, args)
    ray.shutdown()


def pretrain_through_pipeline(cfg) -> Path:
    from pipeline.fingerprint import compute_all
    from pipeline.planner import Selection
    from pipeline.runner import run_pipeline

    run_pipeline(cfg, Selection(only=("ingest", "tokenizer", "dataset", "pretrain")))
    return cfg.resolved_workdir / "pretrain" / compute_all(cfg)["pretrain"][0]


def finished_pretrain_dir(run_dir: Path) -> Path:
    """The newest pretrain stage directory of `run_dir` that has a manifest (finished)."""
    finished = sorted((run_dir / "pretrain").glob("*/manifest.json"), key=lambda p: p.stat().st_mtime)
    if not finished:
        raise SystemExit(f"--run-dir {run_dir}: no finished pretrain stage (no pretrain/*/manifest.json); "
                         "run the pipeline first, or leave --run-dir out to pretrain here")
    return finished[-1].parent


def write_random_init(pretrained_model: Path, root: Path, seed: int) -> Path:
    """`root/model/`: the pretrained model's config and tokenizer, fresh weights."""
    import torch

    from stages.models import build_model, save_pretrained

    fields = json.loads((pretrained_model / "model_config.json").read_text())
    torch.manual_seed(seed)
    model = build_model(fields, vocab_size=fields["vocab_size"])
    shutil.rmtree(root, ignore_errors=True)
    save_pretrained(model, root / "model")
    shutil.copy(pretrained_model / "tokenizer.json", root / "model" / "tokenizer.json")
    return root


def finetune(cfg, pretrain_dir: Path, output_dir: Path, settings: dict) -> dict:
    """The finetune stage as the pipeline runs it, reading `pretrain_dir/model`."""
    from pipeline.config import ExperimentConfig
    from pipeline.context import StageContext
    from stages.finetune.run import run

    shutil.rmtree(output_dir, ignore_errors=True)
    experiment = ExperimentConfig.model_validate(
        {**cfg.model_dump(), "finetune": {**cfg.finetune.model_dump(), **settings}})
    ctx = StageContext(name="finetune", config=experiment.finetune, experiment=experiment,
                       output_dir=output_dir, inputs={"pretrain": pretrain_dir}, fingerprint="benchmark")
    return run(ctx)


def print_table(scores: dict, lrs: list[float], settings: dict, pretrain_dir: Path, args) -> None:
    manifest = json.loads((pretrain_dir / "manifest.json").read_text()) if (pretrain_dir / "manifest.json").is_file() else {}
    model = json.loads((pretrain_dir / "model" / "model_config.json").read_text())
    print(f"\n### Pretrained by the pipeline vs random init (budget {args.budget})\n")
    print(f"model: {model['family']} {model['num_layers']} layers x {model['hidden_size']}, vocab {model['vocab_size']}; "
          f"pretrained {manifest.get('metrics', {}).get('steps')} steps, val_loss "
          f"{manifest.get('metrics', {}).get('val_loss')} ({pretrain_dir}); fine-tuning: "
          f"{settings['max_train_examples'] or 'all'} train examples, {settings['epochs']} epochs, "
          f"max_seq_len {settings['max_seq_len']}\n")
    print("| fine-tuning lr | task | metric | pretrained | random init | pretrained - random (points) |")
    print("|---|---|---|---:|---:|---:|")
    for lr in lrs:
        for task in TASKS:
            key = f"{task}/{PRIMARY[task]}"
            pre, rand = scores["pretrained", lr][key], scores["random", lr][key]
            print(f"| {lr:g} | {task} | {PRIMARY[task]} | {100 * pre:.2f} | {100 * rand:.2f} | {100 * (pre - rand):+.2f} |")
    verdicts = []
    for task in TASKS:
        key = f"{task}/{PRIMARY[task]}"
        best = {name: max(lrs, key=lambda lr: scores[name, lr][key]) for name in ("pretrained", "random")}
        pre, rand = scores["pretrained", best["pretrained"]][key], scores["random", best["random"]][key]
        verdicts.append(pre > rand)
        print(f"| best of grid (pretrained {best['pretrained']:g}, random {best['random']:g}) | {task} "
              f"| {PRIMARY[task]} | {100 * pre:.2f} | {100 * rand:.2f} | {100 * (pre - rand):+.2f} |")
    print(f"\npretraining helps on both tasks (best of the lr grid): {'yes' if all(verdicts) else 'NO'}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
