"""Model FLOPs utilisation (MFU) of GPT-2 small on one GPU, through the pretraining
stage's own step: our GPT (stages/models), the objective the loop trains (CausalLM, its
loss compiled with the blocks under pretrain.compile), DeepSpeed's engine from a
PretrainConfig (stages/training/engine.create_engine) over an NCCL process group, bf16
with SDPA's fused attention, gradient accumulation as pretrain.gradient_accumulation_steps
does it. fp16 with dynamic loss scaling is run too, as a check that the path works.

One command on a machine with a CUDA GPU:

    python benchmarks/gpu_mfu.py                      # gpt2-small, seq 1024, bf16, eager + compile
    python benchmarks/gpu_mfu.py --micro-batch-size 32 64 --grad-accum 1 8 --variants bf16+compile
    python benchmarks/gpu_mfu.py --engine torch       # the same model in plain PyTorch, for the ratio
    python benchmarks/gpu_mfu.py --attention cudnn    # SDPA limited to one kernel (auto: SDPA picks)
    python benchmarks/gpu_mfu.py --pad-vocab-to-multiple-of 1   # GPT-2's unpadded 50257 rows
    python benchmarks/gpu_mfu.py --device cpu --preset gpt-debug --seq-len 32 ...   # smoke test (gloo)

MFU = model FLOPs per optimizer step / step time / peak. Model FLOPs: GPT.flops_per_token
(6N plus attention, PaLM's appendix B), the same estimate the training loop logs as
`mfu`. Peak: --peak-tflops, default 989 (H100 and H200 SXM, dense bf16). Steps are
timed after warm-up (compilation happens there) with a device synchronise; data is
random token ids already on the device, so the figure is the model, objective and engine
alone (the loader is measured in benchmarks/dataset_throughput.py). Dropout is 0, as in
the MFU figures of nanoGPT and the PaLM paper. Each result is also appended to --out as
a JSON line as soon as it exists, so a run cut short keeps what it measured.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from stages.models.build import padded_vocab_size  # noqa: E402
from stages.models.build import build_preset
from stages.models.config import preset_config
from stages.objectives.clm.loss import CausalLM
from stages.pretrain.config import PretrainConfig  # noqa: E402
from stages.training.engine import create_engine, optimizer_step  # noqa: E402
from stages.training.engine_settings import EngineSettings  # noqa: E402
from stages.training.parallelize import compile_loss_for, parallelize_for  # noqa: E402

ATTENTION_BACKENDS = ("auto", "flash", "cudnn", "efficient")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="gpt2-small")
    parser.add_argument("--seq-len", type=int, default=1024)
    parser.add_argument("--micro-batch-size", type=int, nargs="+", default=[32])
    parser.add_argument("--grad-accum", type=int, nargs="+", default=[1],
                        help="pretrain.gradient_accumulation_steps: micro batches per optimizer step")
    parser.add_argument("--variants", nargs="+", default=["bf16", "bf16+compile", "fp16"],
                        help="precision, optionally +compile")
    parser.add_argument("--zero-stage", type=int, nargs="+", default=[1])
    parser.add_argument("--attention", nargs="+", choices=ATTENTION_BACKENDS, default=["auto"],
                        help="the SDPA kernels allowed (auto: SDPA's own choice)")
    parser.add_argument("--compile-backend", default="inductor",
                        help="pretrain.compile_backend (aot_eager: the CPU smoke test, no code generated)")
    parser.add_argument("--no-compile-loss", dest="compile_loss", action="store_false",
                        help="with +compile, leave the objective's loss eager (blocks compiled only), "
                        "to measure what compiling the loss gives")
    parser.add_argument("--optimizer-impl", default="auto", help="pretrain.optimizer_impl (auto: fused on CUDA)")
    parser.add_argument("--steps", type=int, default=12, help="timed optimizer steps")
    parser.add_argument("--warmup", type=int, default=3, help="untimed optimizer steps first (compilation)")
    parser.add_argument("--peak-tflops", type=float, default=989.0)
    parser.add_argument("--engine", choices=["deepspeed", "torch"], default="deepspeed",
                        help="torch: the same model with plain torch (bf16 autocast, fused AdamW), "
                        "the raw-library baseline the engine is compared with")
    parser.add_argument("--pad-vocab-to-multiple-of", type=int, default=64,
                        help="pretrain.model.pad_vocab_to_multiple_of, as configs/gpt2-small.yaml sets it "
                        "(1: GPT-2's own 50257 rows)")
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda",
                        help="cpu: a smoke test of this script (gloo); MFU there means nothing")
    parser.add_argument("--profile", action="store_true", help="print the 20 costliest kernels")
    parser.add_argument("--out", type=Path, default=None, help="append each result here as a JSON line")
    return parser.parse_args(argv)


def init_process_group(device: str) -> None:
    # One rank, but through NCCL on a GPU: the collectives DeepSpeed runs on a cluster.
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29517")
    os.environ.setdefault("RANK", "0")
    os.environ.setdefault("LOCAL_RANK", "0")
    os.environ.setdefault("WORLD_SIZE", "1")
    if dist.is_initialized():
        return
    if device == "cuda":
        torch.cuda.set_device(0)
        dist.init_process_group("nccl", device_id=torch.device("cuda", 0))
    else:
        dist.init_process_group("gloo")


def synchronize(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def allow_attention(backend: str, device: str) -> None:
    """Limit SDPA to one kernel family for the whole run (global flags, so compiled
    graphs see them when traced); auto restores SDPA's own choice."""
    if device != "cuda":
        return
    cuda = torch.backends.cuda
    every = backend == "auto"
    cuda.enable_flash_sdp(every or backend == "flash")
    cuda.enable_cudnn_sdp(every or backend == "cudnn")
    cuda.enable_mem_efficient_sdp(every or backend == "efficient")
    cuda.enable_math_sdp(every)


def run_variant(args: argparse.Namespace, variant: str, micro_batch_size: int, grad_accum: int,
                zero_stage: int, attention: str) -> dict:
    precision, _, extra = variant.partition("+")
    compiled = extra == "compile"
    allow_attention(attention, args.device)
    torch._dynamo.reset()  # a fresh trace per variant: the attention flags are read when tracing
    torch.manual_seed(0)
    real_vocab = preset_config(args.preset).vocab_size  # token ids are drawn from it; padding rows stay unused
    overrides = {"vocab_size": padded_vocab_size(real_vocab, args.pad_vocab_to_multiple_of)}
    model = build_preset(args.preset, dropout=0.0, max_seq_len=args.seq_len, **overrides)
    objective = CausalLM(args.seq_len)
    kernel = attention_kernel(model, args.seq_len, precision, args.device)
    tokens_per_step = args.seq_len * micro_batch_size * grad_accum
    flops_per_step = model.flops_per_token(args.seq_len) * tokens_per_step
    num_parameters = model.num_parameters()
    cfg = PretrainConfig.model_validate({
        "precision": precision, "gpus_per_worker": int(args.device == "cuda"), "num_workers": 1,
        "zero_stage": zero_stage, "compile": compiled, **({"compile_backend": args.compile_backend} if compiled else {}),
        "optimizer_impl": args.optimizer_impl,
        "micro_batch_size": micro_batch_size, "gradient_accumulation_steps": grad_accum, "lr": 6e-4,
        "warmup_steps": 10, "max_steps": args.warmup + args.steps, "peak_tflops": args.peak_tflops,
    })
    # What the training loop does before the engine: compile per block, and the loss.
    parallelize_for(model, cfg)
    loss_compiled = compile_loss_for(objective, cfg) if args.compile_loss else False
    engine = (create_engine(model, EngineSettings.from_pretrain(cfg)) if args.engine == "deepspeed"
              else TorchEngine(model, precision, args.device, grad_accum))
    batches = [{"input_ids": torch.randint(0, real_vocab, (micro_batch_size, args.seq_len), device=engine.device)}
               for _ in range(4)]
    if args.device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    losses, grad_norm, micro_batches = [], None, itertools.cycle(batches)
    started = time.perf_counter()
    warmup_seconds = 0.0
    for step in range(args.warmup + args.steps):
        if step == args.warmup:
            synchronize(args.device)
            warmup_seconds = time.perf_counter() - started
            started = time.perf_counter()
        for _ in range(grad_accum):  # as stages/pretrain/train_loop.py steps
            output = objective(engine, next(micro_batches))
            engine.backward(output.loss)
            grad_norm = optimizer_step(engine)
            losses.append(output.loss.detach())
    synchronize(args.device)
    seconds = (time.perf_counter() - started) / args.steps
    if args.profile:
        profile_steps(engine, objective, batches[0], args.device)
    losses = [float(x) for x in losses]
    scale = getattr(engine.optimizer, "cur_scale", None) or getattr(engine.optimizer, "loss_scale", None)
    result = {
        "preset": args.preset, "variant": variant, "engine": args.engine, "zero_stage": zero_stage,
        "optimizer_impl": args.optimizer_impl, "vocab_size": model.config.vocab_size,
        "micro_batch_size": micro_batch_size, "grad_accum": grad_accum, "seq_len": args.seq_len,
        "attention": kernel, "loss_compiled": loss_compiled, "parameters": num_parameters, "warmup_s": warmup_seconds,
        "step_ms": seconds * 1e3, "tokens_per_s": tokens_per_step / seconds,
        "tflops": flops_per_step / seconds / 1e12, "mfu": flops_per_step / seconds / (args.peak_tflops * 1e12),
        "peak_memory_gib": torch.cuda.max_memory_allocated() / 2**30 if args.device == "cuda" else None,
        "first_loss": losses[0], "last_loss": losses[-1], "grad_norm": grad_norm,
        "loss_scale": float(scale) if scale is not None and precision == "fp16" else None,
        "finite": all(x == x and abs(x) != float("inf") for x in losses),
    }
    del engine, model, batches, micro_batches
    if args.device == "cuda":
        torch.cuda.empty_cache()
    return result


def attention_kernel(model, seq_len: int, precision: str, device: str) -> str:
    """The SDPA kernel the model's causal attention gets under the allowed flags, as SDPA
    itself chooses it for queries of the model's head shape and dtype (probed on its own,
    so that no compiled graph is traced for it)."""
    if device != "cuda":
        return "cpu"
    from torch.nn.attention import SDPBackend

    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision, torch.float32)
    q = torch.randn(1, model.config.num_heads, seq_len, model.config.head_size, device=device, dtype=dtype)
    try:  # private, but SDPA's own pick
        choice = SDPBackend(torch._fused_sdp_choice(q, q, q, is_causal=True))
    except (AttributeError, RuntimeError, TypeError, ValueError) as error:
        return f"unknown ({error})"
    return choice.name.lower().removesuffix("_attention")


class TorchEngine:
    """The raw-library baseline: the model in fp32 under bf16/fp16 autocast, fused AdamW,
    gradient clipping at 1.0, loss divided by the accumulation steps as DeepSpeed does;
    the calls the benchmark makes of a DeepSpeed engine."""

    def __init__(self, model, precision: str, device: str, grad_accum: int):
        self.device = torch.device(device, 0) if device == "cuda" else torch.device("cpu")
        self.module = model.to(self.device)
        self.dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[precision]
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=6e-4, fused=True)
        self.scaler = torch.amp.GradScaler(enabled=precision == "fp16")
        self.grad_accum, self.micro_step = grad_accum, 0

    def __call__(self, ids, **kwargs):
        with torch.autocast(self.device.type, dtype=self.dtype):
            return self.module(ids, **kwargs)

    def backward(self, loss):
        self.scaler.scale(loss / self.grad_accum).backward()

    def is_gradient_accumulation_boundary(self):
        return (self.micro_step + 1) % self.grad_accum == 0

    def zero_optimization(self):
        return False

    def bfloat16_enabled(self):
        return True  # optimizer_step then asks get_global_grad_norm

    def step(self):
        boundary = self.is_gradient_accumulation_boundary()
        self.micro_step += 1
        if not boundary:
            return
        self.scaler.unscale_(self.optimizer)
        self._norm = torch.nn.utils.clip_grad_norm_(self.module.parameters(), 1.0)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.optimizer.zero_grad(set_to_none=True)

    def get_global_grad_norm(self):
        return self._norm


def profile_steps(engine, objective, batch, device: str) -> None:
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    with profile(activities=activities) as prof:
        for _ in range(3):
            engine.backward(objective(engine, batch).loss)
            optimizer_step(engine)
        synchronize(device)
    sort_by = "cuda_time_total" if device == "cuda" else "cpu_time_total"
    print(prof.key_averages().table(sort_by=sort_by, row_limit=20, max_name_column_width=60), flush=True)


def print_table(results: list[dict]) -> None:
    print("\n| engine | ZeRO | variant | attention | micro batch | accum | step ms | tokens/s | TFLOP/s | MFU "
          "| peak GiB | compile+warmup s | loss first→last |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        memory = "" if r["peak_memory_gib"] is None else f"{r['peak_memory_gib']:.1f}"
        variant = r["variant"] + (" (loss eager)" if r["variant"].endswith("compile") and not r["loss_compiled"] else "")
        print(f"| {r['engine']} | {r['zero_stage']} | {variant} | {r['attention']} | {r['micro_batch_size']} "
              f"| {r['grad_accum']} | {r['step_ms']:.1f} | {r['tokens_per_s']:,.0f} | {r['tflops']:.0f} "
              f"| {r['mfu']:.1%} | {memory} | {r['warmup_s']:.0f} | {r['first_loss']:.2f}→{r['last_loss']:.2f} |")
    eager = {(r["micro_batch_size"], r["grad_accum"], r["zero_stage"], r["attention"]): r
             for r in results if r["variant"] == "bf16"}
    for r in results:
        key = (r["micro_batch_size"], r["grad_accum"], r["zero_stage"], r["attention"])
        if r["variant"] == "bf16+compile" and key in eager:
            print(f"compile / eager tokens/s at micro batch {key[0]}, accumulation {key[1]}: "
                  f"{r['tokens_per_s'] / eager[key]['tokens_per_s']:.2f}x")


def main(argv: list[str] | None = None) -> list[dict]:
    args = parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("benchmarks/gpu_mfu.py needs a CUDA GPU (--device cpu runs it as a smoke test only); "
                 "on CPU see benchmarks/memory_features.py")
    init_process_group(args.device)
    if args.device == "cuda":
        print(f"device: {torch.cuda.get_device_name(0)}; torch {torch.__version__}; "
              f"NCCL {'.'.join(map(str, torch.cuda.nccl.version()))}; peak {args.peak_tflops} TFLOP/s", flush=True)
    results = []
    for micro_batch_size, grad_accum, zero_stage, attention, variant in itertools.product(
            args.micro_batch_size, args.grad_accum, args.zero_stage, args.attention, args.variants):
        result = run_variant(args, variant, micro_batch_size, grad_accum, zero_stage, attention)
        results.append(result)
        print(json.dumps(result), flush=True)
        if args.out:
            with args.out.open("a") as out:
                out.write(json.dumps(result) + "\n")
    print_table(results)
    allow_attention("auto", args.device)
    return results


if __name__ == "__main__":
    main()
    dist.destroy_process_group()
