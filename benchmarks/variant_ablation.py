"""The lectures' BERT variants side by side at this machine's scale (issue 18's ablation):
the small-scale version of the ALBERT and ELECTRA papers' comparisons.

    .venv/bin/python benchmarks/variant_ablation.py                    # the full table (~30 min on 2 cores)
    .venv/bin/python benchmarks/variant_ablation.py --budget smoke     # every path once, minutes
    .venv/bin/python benchmarks/variant_ablation.py --variants bert,electra

Every variant gets the same data (the four books of configs/bert-tiny.yaml), the same
WordPiece tokenizer (one tokenizer stage, reused by fingerprint), the same encoder width
and depth, the same token budget (steps x global batch x seq_len) and the same
fine-tuning recipe (SST-2 and CoNLL-2003, seeds 0 and 1). The variants differ only in
what the issue compares:

    bert        masked LM (static masks) + next-sentence prediction       (Devlin et al.)
    roberta     masked LM with dynamic masks, no sentence task           (Liu et al.)
    albert      factorized embeddings E = hidden/2, all layers shared, SOP (Lan et al.)
    spanbert    span masking (geometric, whole words) + span boundary objective, no NSP
    electra     replaced-token detection with a jointly trained 1/4-width generator

All of it runs through the pipeline itself (run_pipeline: ingest -> tokenizer -> dataset ->
pretrain -> finetune), in one workdir, so shared stages are built once. Prints one
markdown table: parameters (the fine-tuned encoder's; ALBERT's are shared), pretraining
wall time, final validation loss of each objective, and the dev scores (mean of the
seeds, and each seed) next to the constant-predictor baselines.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("WANDB_MODE", "disabled")
REPO_ROOT = Path(__file__).resolve().parents[1]
CONFIG = REPO_ROOT / "configs" / "bert-tiny.yaml"
SCORES = (("sst2", "accuracy"), ("conll2003", "f1"))

VARIANTS: dict[str, tuple[str, list[str]]] = {
    "bert": ("BERT (MLM static + NSP)", ["dataset.mlm.sentence_task=nsp", "dataset.mlm.masking=static"]),
    "roberta": ("RoBERTa-style (MLM dynamic)", ["dataset.mlm.sentence_task=none", "dataset.mlm.masking=dynamic"]),
    "albert": ("ALBERT (E = H/2, all shared, SOP)",
               ["dataset.mlm.sentence_task=sop", "dataset.mlm.masking=static", "pretrain.model.variant=albert",
                "pretrain.model.share_layers=all", "pretrain.model.embedding_size={half_hidden}"]),
    "spanbert": ("SpanBERT (span masks + SBO)",
                 ["dataset.mlm.sentence_task=none", "dataset.mlm.masking=static", "dataset.mlm.mask_unit=span",
                  "pretrain.model.span_boundary_objective=true"]),
    "electra": ("ELECTRA (RTD, generator 1/4)",
                ["dataset.mlm.sentence_task=none", "dataset.mlm.masking=dynamic", "pretrain.model.variant=electra"]),
}

# One shape for every variant; the budget sets the pretraining steps and fine-tuning size.
MODEL = {"num_layers": 4, "hidden_size": 128, "num_heads": 4}
BUDGETS = {
    "smoke": dict(steps=20, train_examples=128, epochs=1),
    "small": dict(steps=400, train_examples=2000, epochs=1),  # ~25 min here
    "full": dict(steps=4000, train_examples=20000, epochs=2),  # hours here; the scale where variants differ
}


def overrides_for(variant: str, budget: dict, workdir: Path) -> list[str]:
    _, variant_keys = VARIANTS[variant]
    model = [f"pretrain.model.{key}={value}" for key, value in MODEL.items()]
    return [
        f"workdir={workdir}", "evaluate.tasks=[]",
        "dataset.seq_len=128", *model,
        "pretrain.micro_batch_size=16", f"pretrain.max_steps={budget['steps']}",
        f"pretrain.warmup_steps={max(1, budget['steps'] // 10)}", "pretrain.lr=1e-3",
        f"pretrain.eval_every={budget['steps']}", f"pretrain.checkpoint_every={budget['steps']}",
        "finetune.tasks=[sst2,conll2003]", f"finetune.max_train_examples={budget['train_examples']}",
        f"finetune.epochs={budget['epochs']}", "finetune.max_seq_len=64", "finetune.lr=5e-4",
        "finetune.save_model=false",
        *(key.format(half_hidden=MODEL["hidden_size"] // 2) for key in variant_keys),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--budget", choices=sorted(BUDGETS), default="small")
    parser.add_argument("--variants", default=",".join(VARIANTS),
                        help=f"comma-separated subset of {', '.join(VARIANTS)}")
    parser.add_argument("--seeds", default="0,1", help="comma-separated fine-tuning seeds")
    parser.add_argument("--output", type=Path, default=REPO_ROOT / "runs" / "benchmarks" / "variant_ablation")
    args = parser.parse_args()
    seeds = tuple(int(seed) for seed in args.seeds.split(","))
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = sorted(set(variants) - set(VARIANTS))
    if unknown:
        raise SystemExit(f"--variants: unknown {unknown}; choose from {list(VARIANTS)}")

    import ray

    from pipeline.config import load_config
    from pipeline.fingerprint import compute_all
    from pipeline.planner import Selection
    from pipeline.runner import run_pipeline

    ray.init(num_cpus=2, log_to_driver=False, runtime_env={"env_vars": {"PYTHONPATH": str(REPO_ROOT)}})
    budget = BUDGETS[args.budget]
    workdir = args.output / args.budget
    rows = []
    for variant in variants:
        per_seed = []
        for seed in seeds:
            cfg = load_config(str(CONFIG), [*overrides_for(variant, budget, workdir), f"finetune.seed={seed}"])
            started = time.perf_counter()
            run_pipeline(cfg, Selection(only=("ingest", "tokenizer", "dataset", "pretrain", "finetune")),
                         echo=lambda line: print(f"[{variant} seed {seed}] {line}", flush=True))
            print(f"[{variant} seed {seed}] pipeline {time.perf_counter() - started:.0f}s", flush=True)
            fingerprints = compute_all(cfg)
            per_seed.append(read_manifest(workdir, "finetune", fingerprints)["metrics"])
        pretrain = read_manifest(workdir, "pretrain", fingerprints)
        rows.append((variant, pretrain, per_seed, encoder_parameters(workdir, fingerprints)))
    print_table(rows, budget, args.budget, seeds)
    ray.shutdown()


def read_manifest(workdir: Path, stage: str, fingerprints: dict) -> dict:
    return json.loads((workdir / stage / fingerprints[stage][0] / "manifest.json").read_text())


def encoder_parameters(workdir: Path, fingerprints: dict) -> tuple[int, int]:
    """(encoder parameters a fine-tuned model keeps, every pretraining parameter)."""
    from stages.models import load_pretrained

    model = load_pretrained(workdir / "pretrain" / fingerprints["pretrain"][0] / "model")
    return sum(p.numel() for p in model.backbone.parameters()), sum(p.numel() for p in model.parameters())


def print_table(rows: list, budget: dict, budget_name: str, seeds: tuple[int, ...]) -> None:
    print(f"\n### Variant ablation (budget {budget_name}: {budget['steps']} pretraining steps, "
          f"{MODEL['num_layers']} layers x {MODEL['hidden_size']}, seq_len 128, global batch 32; "
          f"fine-tuning {budget['train_examples']} examples x {budget['epochs']} epochs, seeds {seeds})\n")
    header = ["variant", "encoder params", "pretrain params", "pretrain s", "validation loss per part"]
    for task, metric in SCORES:
        header += [f"{task} {metric} (seeds)", f"{task} baseline"]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for variant, pretrain, per_seed, (encoder, total) in rows:
        metrics = pretrain["metrics"]
        # val_<part>_loss for each part of the objective (mlm, nsp, sop, sbo, rtd)
        losses = ", ".join(f"{key[4:-5]} {value:.2f}" for key, value in sorted(metrics.items())
                           if key.startswith("val_") and key.endswith("_loss") and key != "val_loss")
        cells = [VARIANTS[variant][0], f"{encoder / 1e6:.2f}M", f"{total / 1e6:.2f}M",
                 f"{pretrain['wall_seconds']:.0f}", losses]
        for task, metric in SCORES:
            scores = [100 * seed_metrics[f"{task}/{metric}"] for seed_metrics in per_seed]
            baseline = per_seed[0].get(f"{task}/{metric}_baseline")
            cells.append(f"**{statistics.mean(scores):.2f}** ({', '.join(f'{s:.2f}' for s in scores)})")
            cells.append("-" if baseline is None else f"{100 * baseline:.2f}")
        print("| " + " | ".join(cells) + " |")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
