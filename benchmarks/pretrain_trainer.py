"""Our trainer's training step against a plain PyTorch loop of the same model, batch and
AdamW, on one worker, in fp32 and in bf16; on a GPU also MFU.

    .venv/bin/python benchmarks/pretrain_trainer.py [--rounds 5] [--steps 4] [--batch 8]
        [--seq-len 128] [--layers 4] [--hidden 256] [--heads 4] [--vocab 8192] [--threads 1]
    .venv/bin/python benchmarks/pretrain_trainer.py --device cuda --preset gpt2-small \\
        --seq-len 1024 --batch 16 --precisions bf16 --peak-tflops 989

Variants, all in this one process on identical batches (the same model weights, AdamW
with our decay groups, clipping at 1.0, the same lr schedule):
  plain        model(ids) -> loss.backward() -> clip -> AdamW.step() -> zero_grad()
               (bf16: the forward under torch.autocast, weights and AdamW in fp32)
  ours zero0   stages.training.engine.create_engine (DeepSpeed, ZeRO-0) driven the way
  ours zero2   the pretrain loop drives it: the clm objective, engine.backward,
               optimizer_step (ZeRO-2 is the stage's default); bf16 = DeepSpeed bf16
               (bf16 weights and activations, fp32 master weights in the optimizer)
  ours zero2 autocast   (bf16 only) precision fp32 plus a user DeepSpeed JSON
               {"torch_autocast": {"enabled": true, "dtype": "bfloat16"}} merged in
               through pretrain.deepspeed_config: fp32 weights, bf16 matmuls, as plain
Rounds alternate the variants so that load from other processes hits all alike; the
table gives median tokens/s over rounds, and ratio = variant / plain of the same
precision. MFU = tokens/s x the model's training FLOPs per token / --peak-tflops.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--preset", default=None, help="a stages.models preset (e.g. gpt2-small) instead of the shape flags")
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--vocab", type=int, default=None, help="default 8192, or the preset's")
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--batch", type=int, default=8, help="sequences per step")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=4, help="steps per variant per round")
    parser.add_argument("--precisions", default="fp32,bf16")
    parser.add_argument("--variants", default="plain,ours zero0,ours zero2,ours zero2 autocast")
    parser.add_argument("--threads", type=int, default=1, help="torch threads on CPU (a Ray worker with one CPU gets 1)")
    parser.add_argument("--peak-tflops", type=float, default=None,
                        help="peak dense TFLOP/s of the device for MFU (e.g. 989 for H100/H200 bf16)")
    return parser.parse_args()


def build_gpt(args):
    import torch

    from stages.models import build_model
    from stages.models.build import build_preset

    torch.manual_seed(0)  # every variant starts from the same weights
    if args.preset:
        overrides = {"vocab_size": args.vocab} if args.vocab else {}
        return build_preset(args.preset, max_seq_len=args.seq_len, dropout=0.0, **overrides)
    return build_model({"family": "gpt", "num_layers": args.layers, "hidden_size": args.hidden,
                        "num_heads": args.heads, "dropout": 0.0},
                       vocab_size=args.vocab or 8192, max_seq_len=args.seq_len)


class PlainLoop:
    """The reference: what one would write by hand in PyTorch."""

    def __init__(self, model, precision: str, device: str):
        import torch

        from stages.training.deepspeed_config import build_param_groups
        from stages.training.schedule import WarmupDecaySchedule

        self.model = model.to(device).train()
        # torch's default AdamW implementation, as create_engine builds it
        self.optimizer = torch.optim.AdamW(build_param_groups(self.model, 0.1), lr=1e-4, betas=(0.9, 0.95))
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, WarmupDecaySchedule(warmup_steps=10, max_steps=10_000))
        self.autocast = torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=precision == "bf16")

    def step(self, ids) -> float:
        import torch

        from stages.objectives.clm.loss import next_token_loss

        with self.autocast:
            loss, _ = next_token_loss(self.model(ids), ids)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        return loss.item()


class OurTrainer:
    """The pretrain loop's inner step on an engine from create_engine."""

    def __init__(self, model, precision: str, zero_stage: int, batch: int, autocast: bool = False):
        from stages.objectives.clm.loss import CausalLM
        from stages.pretrain.config import PretrainConfig
        from stages.training.engine import create_engine
        from stages.training.engine_settings import EngineSettings

        cfg = PretrainConfig(micro_batch_size=batch, zero_stage=zero_stage, lr=1e-4, warmup_steps=10,
                             max_steps=10_000, precision="fp32" if autocast else precision)
        user = {"torch_autocast": {"enabled": True, "dtype": "bfloat16"}} if autocast else None
        self.engine = create_engine(model, EngineSettings.from_pretrain(cfg), user_deepspeed_config=user)
        self.objective = CausalLM(model.config.max_seq_len)

    def step(self, ids) -> float:
        from stages.training.engine import optimizer_step

        output = self.objective(self.engine, {"input_ids": ids})
        self.engine.backward(output.loss)
        optimizer_step(self.engine)
        return output.loss.item()


def main() -> None:
    args = parse_args()
    if args.device == "cpu":
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ.get("MASTER_PORT", "29533"),
                      RANK="0", LOCAL_RANK="0", WORLD_SIZE="1")
    import torch
    import torch.distributed as dist

    if args.device == "cpu":
        torch.set_num_threads(args.threads)
    dist.init_process_group("nccl" if args.device == "cuda" else "gloo", rank=0, world_size=1)

    precisions = args.precisions.split(",")
    variants = args.variants.split(",")
    runners = {}
    for precision in precisions:
        for variant in variants:
            model = build_gpt(args)
            autocast = variant.endswith("autocast")
            if autocast and precision != "bf16":
                continue
            if variant == "plain":
                runners[(variant, precision)] = PlainLoop(model, precision, args.device)
            else:
                model = model.to(args.device)
                stage = int(variant.split()[1][-1])
                runners[(variant, precision)] = OurTrainer(model, precision, stage, args.batch, autocast)
    probe = build_gpt(args)
    flops_per_token = probe.flops_per_token(args.seq_len)
    num_parameters, vocab_size = probe.num_parameters(), probe.config.vocab_size
    del probe

    generator = torch.Generator().manual_seed(0)
    batches = [torch.randint(0, vocab_size, (args.batch, args.seq_len), generator=generator).to(args.device)
               for _ in range(args.steps)]
    tokens_per_round = args.batch * args.seq_len * args.steps

    def timed(runner) -> float:
        if args.device == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        for ids in batches:
            runner.step(ids)
        if args.device == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - start

    for runner in runners.values():  # warm-up: kernels, allocator, DeepSpeed's first-step work
        timed(runner)
    seconds: dict = {key: [] for key in runners}
    for _ in range(args.rounds):
        for key, runner in runners.items():
            seconds[key].append(timed(runner))

    print(f"\nGPT {num_parameters / 1e6:.1f}M parameters, batch {args.batch} x {args.seq_len} tokens, "
          f"{args.rounds} rounds x {args.steps} steps, device {args.device}"
          + (f", {args.threads} thread(s)" if args.device == "cpu" else f" ({torch.cuda.get_device_name()})")
          + f", torch {torch.__version__}\n")
    header = "| variant | precision | tokens/s (median) | ratio vs plain |"
    divider = "|---|---|---|---|"
    if args.peak_tflops:
        header += " MFU |"
        divider += "---|"
    print(header)
    print(divider)
    for (variant, precision), values in seconds.items():
        tokens_per_s = tokens_per_round / statistics.median(values)
        plain = seconds.get(("plain", precision))
        ratio = f"{statistics.median(plain) / statistics.median(values):.2f}" if plain else "-"
        row = f"| {variant} | {precision} | {tokens_per_s:,.0f} | {ratio} |"
        if args.peak_tflops:
            row += f" {tokens_per_s * flops_per_token / (args.peak_tflops * 1e12):.1%} |"
        print(row)
    for variant in variants:
        if all((variant, p) in seconds for p in ("fp32", "bf16")):
            speedup = statistics.median(seconds[(variant, "fp32")]) / statistics.median(seconds[(variant, "bf16")])
            print(f"\nbf16 vs fp32, {variant}: {speedup:.2f}x tokens/s", end="")
    print()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
