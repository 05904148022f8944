"""Activation checkpointing and per-block torch.compile at the gpt2-small width on CPU:
peak memory per worker and tokens/s, as ratios against the plain model.

    .venv/bin/python benchmarks/memory_features.py [--seq-len 512] [--batch 2] [--steps 3]
        [--layers 12] [--variants plain,full,every_2,compile,compile+full] [--backend inductor]

Each variant runs in a fresh process (one worker: a gloo process group of 1, fp32, the
engine from stages.training.create_engine after stages.training.parallelize_for, driven
as the pretrain loop drives it) on the same random batches. Memory per worker:
- peak RSS: the process's high-water mark (ru_maxrss), what the worker needs from the
  machine; it includes the first optimizer step, where AdamW allocates its state while the
  gradients are still held, which can be the peak rather than the activations;
- step peak over steady state: RSS sampled every 2 ms during the timed steps, its maximum
  minus the RSS just before them (weights, gradients and AdamW state already allocated):
  the memory a training step adds, mostly activations. glibc is told to serve every
  allocation over 128 KiB with mmap (MALLOC_MMAP_THRESHOLD_), so freed tensors leave the
  RSS at once instead of staying cached in the heap.
tokens/s is over the timed steps, after 2 warm-up steps in every variant (with compile the
first compiles the blocks, the second checks that nothing recompiles), so the last losses
are comparable. fp32 because this CPU has no bf16 matrix units.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

# variant -> pretrain section settings (stages/pretrain/config.py)
VARIANTS = {
    "plain": {},
    "full": {"activation_checkpointing": "full"},
    "every_2": {"activation_checkpointing": "every_n", "activation_checkpointing_every": 2},
    "compile": {"compile": True},
    "compile+full": {"compile": True, "activation_checkpointing": "full"},
}


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--hidden", type=int, default=768)
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--vocab", type=int, default=50257)
    parser.add_argument("--seq-len", type=int, default=512)
    parser.add_argument("--batch", type=int, default=2, help="sequences per step (micro batch)")
    parser.add_argument("--steps", type=int, default=3, help="timed steps")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--backend", default="inductor", help="pretrain.compile_backend")
    parser.add_argument("--worker", help=argparse.SUPPRESS)  # run one variant in this process
    return parser.parse_args()


def rss_mb() -> float:
    import psutil

    return psutil.Process().memory_info().rss / 2**20


def run_variant(args: argparse.Namespace) -> dict:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ.get("MASTER_PORT", "29731"), RANK="0",
                      LOCAL_RANK="0", WORLD_SIZE="1", DS_ACCELERATOR="cpu")
    import torch
    import torch.distributed as dist

    from stages.models import build_model
    from stages.objectives.clm.loss import CausalLM
    from stages.pretrain.config import PretrainConfig
    from stages.training.engine import create_engine, optimizer_step
    from stages.training.engine_settings import EngineSettings
    from stages.training.parallelize import parallelize_for

    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo", rank=0, world_size=1)
    settings = dict(VARIANTS[args.worker])
    if settings.get("compile"):
        settings["compile_backend"] = args.backend
    cfg = PretrainConfig(micro_batch_size=args.batch, zero_stage=0, lr=1e-4, warmup_steps=10,
                         max_steps=10_000, **settings)
    baseline = rss_mb()
    torch.manual_seed(0)
    model = build_model({"family": "gpt", "num_layers": args.layers, "hidden_size": args.hidden,
                         "num_heads": args.heads, "dropout": 0.0}, vocab_size=args.vocab, max_seq_len=args.seq_len)
    num_parameters = model.num_parameters()
    parallelize_for(model, cfg)
    engine = create_engine(model, EngineSettings.from_pretrain(cfg))
    engine_rss = rss_mb()
    objective = CausalLM(args.seq_len)
    generator = torch.Generator().manual_seed(0)
    batches = [torch.randint(0, args.vocab, (args.batch, args.seq_len), generator=generator) for _ in range(2)]

    def train(steps: int) -> list[float]:
        losses = []
        for step in range(steps):
            output = objective(engine, {"input_ids": batches[step % len(batches)]})
            engine.backward(output.loss)
            optimizer_step(engine)
            losses.append(output.loss.item())
        return losses

    warmup_started = time.perf_counter()
    train(2)
    warmup_seconds = time.perf_counter() - warmup_started
    steady_rss = rss_mb()
    sampler = PeakSampler()
    start = time.perf_counter()
    losses = train(args.steps)
    seconds = time.perf_counter() - start
    step_peak = sampler.stop()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    return {"variant": args.worker, "tokens_per_s": args.steps * args.batch * args.seq_len / seconds,
            "peak_rss_mb": peak, "peak_growth_mb": peak - baseline, "engine_growth_mb": engine_rss - baseline,
            "step_peak_mb": step_peak - steady_rss, "warmup_s": warmup_seconds, "last_loss": losses[-1],
            "num_parameters": num_parameters}


class PeakSampler:
    """The highest RSS seen, sampled every 2 ms on a thread (torch's kernels release the GIL)."""

    def __init__(self) -> None:
        import psutil

        self._process, self._peak, self._done = psutil.Process(), 0, threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._done.is_set():
            self._peak = max(self._peak, self._process.memory_info().rss)
            time.sleep(0.002)

    def stop(self) -> float:
        self._done.set()
        self._thread.join()
        return self._peak / 2**20


def main() -> None:
    args = parse_args()
    if args.worker:
        print("RESULT" + json.dumps(run_variant(args)))
        return
    results = []
    for index, variant in enumerate(args.variants.split(",")):
        command = [sys.executable, __file__, "--worker", variant, *sys.argv[1:]]
        env = {**os.environ, "MASTER_PORT": str(29731 + index), "PYTHONPATH": str(REPO_ROOT),
               "MALLOC_MMAP_THRESHOLD_": str(128 * 1024)}
        done = subprocess.run(command, env=env, capture_output=True, text=True)
        lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT")]
        if done.returncode != 0 or not lines:
            sys.exit(f"variant {variant} failed:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
        results.append(json.loads(lines[-1][len("RESULT"):]))
        print(f"{variant}: {results[-1]}", file=sys.stderr)
    plain = next((r for r in results if r["variant"] == "plain"), results[0])
    print(f"\nGPT {plain['num_parameters'] / 1e6:.1f}M parameters ({args.layers} layers x {args.hidden}, vocabulary "
          f"{args.vocab}), batch {args.batch} x {args.seq_len} tokens, fp32, one worker, {args.threads} threads, "
          f"{args.steps} timed steps, compile backend {args.backend}; ratios against {plain['variant']}\n")
    print("| variant | tokens/s | ratio | peak RSS (MB) | ratio | step peak over steady state (MB) | ratio "
          "| warm-up, 2 steps (s) | last loss |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['variant']} | {r['tokens_per_s']:.0f} | {r['tokens_per_s'] / plain['tokens_per_s']:.2f} "
              f"| {r['peak_rss_mb']:.0f} | {r['peak_rss_mb'] / plain['peak_rss_mb']:.2f} "
              f"| {r['step_peak_mb']:.0f} | {r['step_peak_mb'] / plain['step_peak_mb']:.2f} "
              f"| {r['warmup_s']:.1f} | {r['last_loss']:.4f} |")


if __name__ == "__main__":
    main()
