"""ZeRO stages 0-3 (and CPU offload) on 2 workers: tokens/s and peak memory per worker.

    .venv/bin/python benchmarks/pretrain_zero.py [--rounds 2] [--steps 6] [--batch 4] [--seq-len 128]
        [--layers 4] [--hidden 512] [--heads 8] [--vocab 16384] [--configs 0,1,2,3,2+offload,3+offload]

Each configuration runs in 2 fresh processes (a gloo process group of 2, one torch
thread each, as two one-CPU Ray Train workers get), with the engine from
stages.training.create_engine driven the way the pretrain loop drives it, on identical
random batches. Rounds run every configuration once, in alternating order, so that load
from other processes hits all alike; the table gives medians over rounds. Per worker: tokens/s over the timed steps (after 2 warm-up steps) and
peak RSS, both as the process's high-water mark (ru_maxrss) and as the growth over the
RSS just before the model was built (what model, gradients, optimizer state and
DeepSpeed's buffers cost; imports are the same for all), and the RSS growth still held
after training (the steady state, without construction-time transients: our trainer
builds the whole model on every rank before DeepSpeed partitions it). The model is big enough (fp32 AdamW state of a few
hundred MB) for sharding to show. "+offload" moves the optimizer state (and for ZeRO-3
the parameters) to CPU memory: on a CPU machine that is the same memory, so it shows the
cost of the extra copies, not a saving.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--vocab", type=int, default=16384)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--batch", type=int, default=4, help="sequences per worker per step")
    parser.add_argument("--steps", type=int, default=6, help="timed steps")
    parser.add_argument("--configs", default="0,1,2,3,2+offload,3+offload")
    parser.add_argument("--rounds", type=int, default=2)
    return parser.parse_args()


def rss_mb() -> float:
    import psutil

    return psutil.Process().memory_info().rss / 2**20


def worker(rank: int, args: argparse.Namespace, config: str, port: int, result_dir: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), LOCAL_RANK=str(rank),
                      WORLD_SIZE="2", DS_ACCELERATOR="cpu")
    import torch
    import torch.distributed as dist

    from stages.models import build_model
    from stages.objectives.clm.loss import CausalLM
    from stages.pretrain.config import PretrainConfig
    from stages.training.engine import create_engine, optimizer_step
    from stages.training.engine_settings import EngineSettings

    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    stage, offload = int(config[0]), config.endswith("offload")
    import deepspeed.runtime.zero.stage3  # noqa: F401  (imports out of the measured growth)

    baseline = rss_mb()
    torch.manual_seed(0)
    model = build_model({"family": "gpt", "num_layers": args.layers, "hidden_size": args.hidden,
                         "num_heads": args.heads, "dropout": 0.0}, vocab_size=args.vocab, max_seq_len=args.seq_len)
    cfg = PretrainConfig(micro_batch_size=args.batch, zero_stage=stage, lr=1e-4, warmup_steps=10,
                         max_steps=10_000, offload_optimizer=offload, offload_param=offload and stage == 3)
    engine = create_engine(model, EngineSettings.from_pretrain(cfg))
    objective = CausalLM(args.seq_len)
    generator = torch.Generator().manual_seed(rank)
    batches = [torch.randint(0, args.vocab, (args.batch, args.seq_len), generator=generator) for _ in range(4)]

    def train(steps: int) -> float:
        for step in range(steps):
            output = objective(engine, {"input_ids": batches[step % len(batches)]})
            engine.backward(output.loss)
            optimizer_step(engine)
        return output.loss.item()

    train(2)
    dist.barrier()
    start = time.perf_counter()
    loss = train(args.steps)
    dist.barrier()
    seconds = time.perf_counter() - start
    result = {
        "tokens_per_s": args.steps * args.batch * args.seq_len / seconds,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,  # KiB on Linux
        "baseline_rss_mb": baseline, "final_rss_mb": rss_mb(), "loss": loss,
        "num_parameters": model.num_parameters(),
    }
    with open(Path(result_dir, f"{config}-rank{rank}.jsonl"), "a") as results:
        results.write(json.dumps(result) + "\n")
    dist.destroy_process_group()


def main() -> None:
    args = parse_args()
    import torch.multiprocessing as mp

    configs = args.configs.split(",")
    with tempfile.TemporaryDirectory() as result_dir:
        for round_index in range(args.rounds):
            order = configs if round_index % 2 == 0 else configs[::-1]
            for i, config in enumerate(order):
                mp.spawn(worker, args=(args, config, 29640 + 10 * round_index + i, result_dir), nprocs=2, join=True)
        # per config, per rank: the rounds' results
        results = {config: [[json.loads(line) for line in Path(result_dir, f"{config}-rank{r}.jsonl").read_text().splitlines()]
                            for r in range(2)] for config in configs}
    num_parameters = results[configs[0]][0][0]["num_parameters"]
    print(f"\nGPT {num_parameters / 1e6:.1f}M parameters ({num_parameters * 4 / 2**20:.0f} MB fp32), 2 workers x "
          f"batch {args.batch} x {args.seq_len} tokens, {args.steps} timed steps, 1 thread per worker, "
          f"medians of {args.rounds} rounds\n")
    print("| ZeRO | tokens/s (both workers) | peak RSS per worker (MB) | peak growth per worker (MB) "
          "| RSS after training, growth (MB) | last loss |")
    print("|---|---|---|---|---|---|")
    for config in configs:
        ranks = results[config]

        def median(key, rank, minus=None):
            return statistics.median(r[key] - (r[minus] if minus else 0) for r in ranks[rank])

        tokens = statistics.median(sum(ranks[r][i]["tokens_per_s"] for r in range(2)) for i in range(args.rounds))
        peak = " / ".join(f"{median('peak_rss_mb', r):.0f}" for r in range(2))
        growth = " / ".join(f"{median('peak_rss_mb', r, 'baseline_rss_mb'):.0f}" for r in range(2))
        final = " / ".join(f"{median('final_rss_mb', r, 'baseline_rss_mb'):.0f}" for r in range(2))
        print(f"| {config} | {tokens:,.0f} | {peak} | {growth} | {final} | {ranks[0][0]['loss']:.3f} |")


if __name__ == "__main__":
    main()
