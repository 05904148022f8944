"""Model FLOPs utilisation (MFU) of GPT-2 small on one GPU, through the pretraining
stage's own engine path: our GPT (stages/models), DeepSpeed's engine from a
PretrainConfig (stages/training/engine.create_engine) over an NCCL process group, bf16
with flash SDPA, with and without per-block torch.compile (stages/training/parallelize).
fp16 with dynamic loss scaling is run too, as a check that the path works.

One command on a machine with a CUDA GPU:

    python benchmarks/gpu_mfu.py                      # gpt2-small, seq 1024, bf16, eager + compile
    python benchmarks/gpu_mfu.py --micro-batch-size 16 32 --variants bf16 bf16+compile
    python benchmarks/gpu_mfu.py --engine torch       # the same model in plain PyTorch, for the ratio
    python benchmarks/gpu_mfu.py --pad-vocab-to-multiple-of 1   # GPT-2's unpadded 50257 rows

MFU = model FLOPs per step / step time / peak. Model FLOPs: GPT.flops_per_token (6N plus
attention, PaLM's appendix B), the same estimate the training loop logs as `mfu`. Peak:
--peak-tflops, default 989 (H100 SXM, dense bf16). Steps are timed after warm-up with
torch.cuda.synchronize; data is random token ids already on the GPU, so the figure is
the model and engine alone (the loader is measured in benchmarks/dataset_throughput.py).
Dropout is 0, as in the MFU figures of nanoGPT and the PaLM paper.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from stages.models.build import padded_vocab_size  # noqa: E402
from stages.models.presets import build_preset, preset_config  # noqa: E402
from stages.pretrain.config import PretrainConfig  # noqa: E402
from stages.training.engine import create_engine, optimizer_step  # noqa: E402
from stages.training.engine_settings import EngineSettings  # noqa: E402
from stages.training.parallelize import parallelize_for  # noqa: E402


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="gpt2-small")
    parser.add_argument("--seq-len", type=int, default=1024)
    parser.add_argument("--micro-batch-size", type=int, nargs="+", default=[16])
    parser.add_argument("--variants", nargs="+", default=["bf16", "bf16+compile", "fp16"],
                        help="precision, optionally +compile")
    parser.add_argument("--zero-stage", type=int, default=1)
    parser.add_argument("--optimizer-impl", default="auto", help="pretrain.optimizer_impl (auto: fused on CUDA)")
    parser.add_argument("--steps", type=int, default=30, help="timed optimizer steps")
    parser.add_argument("--warmup", type=int, default=8, help="untimed steps first (compilation happens here)")
    parser.add_argument("--peak-tflops", type=float, default=989.0)
    parser.add_argument("--engine", choices=["deepspeed", "torch"], default="deepspeed",
                        help="torch: the same model with plain torch (bf16 autocast, fused AdamW), "
                        "the raw-library baseline the engine is compared with")
    parser.add_argument("--pad-vocab-to-multiple-of", type=int, default=128,
                        help="pretrain.model.pad_vocab_to_multiple_of, as configs/gpt2-small.yaml sets it "
                        "(1: GPT-2's own 50257 rows)")
    parser.add_argument("--profile", action="store_true", help="print the 20 costliest CUDA kernels")
    parser.add_argument("--out", type=Path, default=None, help="write the results as JSON here")
    return parser.parse_args()


def init_process_group() -> None:
    # One rank, but through NCCL: the same collectives DeepSpeed runs on a cluster.
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29517")
    os.environ.setdefault("RANK", "0")
    os.environ.setdefault("LOCAL_RANK", "0")
    os.environ.setdefault("WORLD_SIZE", "1")
    torch.cuda.set_device(0)
    dist.init_process_group("nccl", device_id=torch.device("cuda", 0))


def check_flash_attention(engine, ids: torch.Tensor) -> str:
    """One forward pass allowed only the flash kernel: raises if SDPA cannot use it for
    this model's inputs (wrong dtype, a mask where is_causal should be)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with torch.no_grad(), sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
        engine(ids[:1], labels=ids[:1])
    return "flash"


def run_variant(args: argparse.Namespace, variant: str, micro_batch_size: int) -> dict:
    precision, _, extra = variant.partition("+")
    compiled = extra == "compile"
    torch.manual_seed(0)
    real_vocab = preset_config(args.preset).vocab_size  # token ids are drawn from it; padding rows stay unused
    overrides = {"vocab_size": padded_vocab_size(real_vocab, args.pad_vocab_to_multiple_of)}
    model = build_preset(args.preset, dropout=0.0, max_seq_len=args.seq_len, **overrides)
    flops_per_step = model.flops_per_token(args.seq_len) * args.seq_len * micro_batch_size
    num_parameters = model.num_parameters()
    cfg = PretrainConfig.model_validate({
        "precision": precision, "gpus_per_worker": 1, "num_workers": 1, "zero_stage": args.zero_stage,
        "compile": compiled, "optimizer_impl": args.optimizer_impl,
        "micro_batch_size": micro_batch_size, "lr": 6e-4, "warmup_steps": 10,
        "max_steps": args.warmup + args.steps, "peak_tflops": args.peak_tflops,
    })
    parallelize_for(model, cfg)  # what the training loop does before the engine: compile per block
    engine = create_engine(model, EngineSettings.from_pretrain(cfg)) if args.engine == "deepspeed" else TorchEngine(model, precision)
    vocab = model.config.vocab_size
    batches = [torch.randint(0, real_vocab, (micro_batch_size, args.seq_len), device=engine.device) for _ in range(4)]
    attention = check_flash_attention(engine, batches[0])
    torch.cuda.reset_peak_memory_stats()
    losses, grad_norm = [], None
    started = time.perf_counter()
    for step in range(args.warmup + args.steps):
        if step == args.warmup:
            torch.cuda.synchronize()
            started = time.perf_counter()
        ids = batches[step % len(batches)]
        _, loss = engine(ids, labels=ids)
        engine.backward(loss)
        grad_norm = optimizer_step(engine)
        losses.append(loss.detach())
    torch.cuda.synchronize()
    seconds = (time.perf_counter() - started) / args.steps
    if args.profile:
        profile_steps(engine, batches[0])
    losses = [float(x) for x in losses]
    scale = getattr(engine.optimizer, "cur_scale", None) or getattr(engine.optimizer, "loss_scale", None)
    result = {
        "preset": args.preset, "variant": variant, "engine": args.engine, "optimizer_impl": args.optimizer_impl, "vocab_size": vocab, "micro_batch_size": micro_batch_size,
        "seq_len": args.seq_len, "zero_stage": args.zero_stage, "parameters": num_parameters,
        "step_ms": seconds * 1e3, "tokens_per_s": micro_batch_size * args.seq_len / seconds,
        "tflops": flops_per_step / seconds / 1e12, "mfu": flops_per_step / seconds / (args.peak_tflops * 1e12),
        "peak_memory_gib": torch.cuda.max_memory_allocated() / 2**30, "attention": attention,
        "first_loss": losses[0], "last_loss": losses[-1], "grad_norm": grad_norm,
        "loss_scale": float(scale) if scale is not None and precision == "fp16" else None,
        "finite": all(x == x and abs(x) != float("inf") for x in losses),
    }
    del engine, model, batches
    torch.cuda.empty_cache()
    return result


class TorchEngine:
    """The raw-library baseline: the model in fp32 under bf16/fp16 autocast, fused AdamW,
    gradient clipping at 1.0; the calls the benchmark makes of a DeepSpeed engine."""

    def __init__(self, model, precision: str):
        self.device = torch.device("cuda", 0)
        self.module = model.to(self.device)
        self.dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[precision]
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=6e-4, fused=True)
        self.scaler = torch.amp.GradScaler(enabled=precision == "fp16")

    def __call__(self, ids, labels):
        with torch.autocast("cuda", dtype=self.dtype):
            return self.module(ids, labels=labels)

    def backward(self, loss):
        self.scaler.scale(loss).backward()

    def is_gradient_accumulation_boundary(self):
        return True

    def zero_optimization(self):
        return False

    def bfloat16_enabled(self):
        return True  # optimizer_step then asks get_global_grad_norm

    def step(self):
        self.scaler.unscale_(self.optimizer)
        self._norm = torch.nn.utils.clip_grad_norm_(self.module.parameters(), 1.0)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.optimizer.zero_grad(set_to_none=True)

    def get_global_grad_norm(self):
        return self._norm


def profile_steps(engine, ids) -> None:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(3):
            _, loss = engine(ids, labels=ids)
            engine.backward(loss)
            optimizer_step(engine)
        torch.cuda.synchronize()
    print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=20, max_name_column_width=60), flush=True)


def main() -> None:
    args = parse_args()
    if not torch.cuda.is_available():
        sys.exit("benchmarks/gpu_mfu.py needs a CUDA GPU; on CPU see benchmarks/memory_features.py")
    init_process_group()
    print(f"device: {torch.cuda.get_device_name(0)}; torch {torch.__version__}; "
          f"NCCL {'.'.join(map(str, torch.cuda.nccl.version()))}; peak {args.peak_tflops} TFLOP/s", flush=True)
    results = []
    for micro_batch_size in args.micro_batch_size:
        for variant in args.variants:
            result = run_variant(args, variant, micro_batch_size)
            results.append(result)
            print(json.dumps(result), flush=True)
    print(f"\n| engine | vocab | variant | micro batch | step ms | tokens/s | TFLOP/s | MFU | peak GiB | loss first→last |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['engine']} | {r['vocab_size']} | {r['variant']} | {r['micro_batch_size']} | {r['step_ms']:.1f} | {r['tokens_per_s']:,.0f} | "
              f"{r['tflops']:.0f} | {r['mfu']:.1%} | {r['peak_memory_gib']:.1f} | "
              f"{r['first_loss']:.2f}→{r['last_loss']:.2f} |")
    eager = {r["micro_batch_size"]: r for r in results if r["variant"] == "bf16"}
    for r in results:
        if r["variant"] == "bf16+compile" and r["micro_batch_size"] in eager:
            print(f"compile / eager tokens/s at micro batch {r['micro_batch_size']}: "
                  f"{r['tokens_per_s'] / eager[r['micro_batch_size']]['tokens_per_s']:.2f}x")
    if args.out:
        args.out.write_text(json.dumps(results, indent=2) + "\n")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
