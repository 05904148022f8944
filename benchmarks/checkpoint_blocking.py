"""Training-blocked seconds per checkpoint, synchronous vs pretrain.checkpoint_async.

    .venv/bin/python benchmarks/checkpoint_blocking.py [--models gpt-tiny,gpt2-small] [--zero 1,3]
        [--steps 6] [--every 2] [--seq-len 128] [--batch 2]

One Ray Train run (2 workers, gloo, one CPU each, DeepSpeed CPU accelerator, fp32), as
`pretrain run` starts it (stages.training.launch.fit); inside it, for each model and
ZeRO stage, the same training twice: once with synchronous checkpoints
(stages.training.checkpoint.report_checkpoint) and once with asynchronous ones
(stages.training.async_checkpoint.AsyncCheckpointer), each from the same seed on the
same random batches, checkpointing every --every steps and at the last step, as the
pretrain loop does. Per checkpoint it records the seconds the training thread spent in
the save call: synchronous = DeepSpeed writing the files + Ray Train's report (copy to
the run's storage, barrier); asynchronous = waiting for the previous save + copying the
state to host memory (save_checkpoint through the snapshot engine) + the report call
(agreeing on the directory name); the background write and upload are shown beside it,
and the wait for the last save after the loop ("drain"). Also the wall time of the whole
loop (steps + checkpoints + drain: what async saves for real, after the background
thread's competition for the 2 cores) and the final loss of both, which must be equal.
Figures are rank 0's (rank 1's are alike).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

MODELS = {
    # configs/gpt-tiny.yaml's model and vocabulary
    "gpt-tiny": ({"family": "gpt", "num_layers": 2, "hidden_size": 64, "num_heads": 2, "dropout": 0.0}, 2048),
    # stages/models/gpt/config.py's gpt2-small (124M parameters), GPT-2's vocabulary
    "gpt2-small": ({"preset": "gpt2-small"}, 50257),
}


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="gpt-tiny,gpt2-small")
    parser.add_argument("--zero", default="1,3", help="ZeRO stages")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--every", type=int, default=2, help="checkpoint every this many steps (and at the end)")
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--batch", type=int, default=2, help="sequences per worker per step")
    return parser.parse_args()


def train_loop(config: dict) -> None:
    """Every (model, ZeRO stage, mode) in turn, on each worker; rank 0 writes the results."""
    import ray.train
    import torch

    from stages.models import build_model
    from stages.objectives.clm.loss import CausalLM
    from stages.pretrain.config import PretrainConfig
    from stages.pretrain.model_config import model_config
    from stages.training.async_checkpoint import open_checkpointer
    from stages.training.engine import create_engine, optimizer_step
    from stages.training.engine_settings import EngineSettings

    rank = ray.train.get_context().get_world_rank()
    torch.set_num_threads(1)
    results = []
    run_index = 0
    for name in config["models"]:
        model_fields, vocab = MODELS[name]
        for zero in config["zero"]:
            for asynchronous in (False, True):
                run_index += 1
                torch.manual_seed(0)
                model_cfg = model_config(**model_fields)
                model = build_model(model_cfg.architecture(), vocab_size=vocab, max_seq_len=config["seq_len"])
                num_parameters = model.num_parameters()  # before ZeRO-3 partitions it
                cfg = PretrainConfig(model=model_cfg, micro_batch_size=config["batch"], zero_stage=zero,
                                     precision="fp32", lr=1e-4, warmup_steps=2, max_steps=config["steps"],
                                     checkpoint_async=asynchronous)
                engine = create_engine(model, EngineSettings.from_pretrain(cfg))
                checkpointer = open_checkpointer(engine, asynchronous=asynchronous)
                objective = CausalLM(config["seq_len"])
                generator = torch.Generator().manual_seed(rank)
                torch.manual_seed(1000 + rank)  # dropout, as the pretrain loop seeds it
                saves, losses = [], []
                started = time.perf_counter()
                for step in range(1, config["steps"] + 1):
                    batch = torch.randint(0, vocab, (config["batch"], config["seq_len"]), generator=generator)
                    output = objective(engine, {"input_ids": batch})
                    engine.backward(output.loss)
                    optimizer_step(engine)
                    losses.append(output.loss.item())
                    if step % config["every"] == 0 or step == config["steps"]:
                        # Distinct step numbers per configuration: one Ray Train run holds them all.
                        phases = checkpointer.save(1000 * run_index + step, {"bench": name}, {"loss": losses[-1]})
                        background = dict(getattr(checkpointer, "background_seconds", {}))
                        saves.append({"phases": phases, "blocked": sum(phases.values()),
                                      "previous_background": background,
                                      "host_copy_mb": getattr(checkpointer, "snapshot_bytes", 0) / 2**20})
                drain_started = time.perf_counter()
                checkpointer.finish()
                finished = time.perf_counter()
                results.append({
                    "model": name, "zero": zero, "mode": "async" if asynchronous else "sync",
                    "num_parameters": num_parameters, "saves": saves,
                    "last_background": dict(getattr(checkpointer, "background_seconds", {})),
                    "drain": finished - drain_started, "loop_seconds": finished - started,
                    "losses": losses,
                })
                if hasattr(engine, "destroy"):
                    engine.destroy()
                del engine, model, checkpointer
                gc.collect()
    if rank == 0:
        Path(config["result_file"]).write_text(json.dumps(results))


def main() -> None:
    args = parse_args()
    import ray

    from stages.training.launch import fit

    with tempfile.TemporaryDirectory(prefix="checkpoint-blocking-") as workdir:
        result_file = Path(workdir) / "results.json"
        ray.init(num_cpus=2, log_to_driver=False, include_dashboard=False)
        try:
            fit(train_loop, {"models": args.models.split(","), "zero": [int(z) for z in args.zero.split(",")],
                             "steps": args.steps, "every": args.every, "seq_len": args.seq_len,
                             "batch": args.batch, "result_file": str(result_file)},
                num_workers=2, storage_path=Path(workdir) / "ray", run_name="checkpoint-blocking",
                checkpoints_to_keep=1)
        finally:
            ray.shutdown()
        results = json.loads(result_file.read_text())
    report(results, args)


def report(results: list[dict], args: argparse.Namespace) -> None:
    print(f"\n2 workers x batch {args.batch} x {args.seq_len} tokens, fp32, {args.steps} steps, a checkpoint "
          f"every {args.every} steps and at the end; seconds on rank 0\n")
    print("| model | ZeRO | mode | blocked per checkpoint (s) | of which | background write + upload (s) "
          "| host copy (MB) | drain at end (s) | loop wall (s) | final loss |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    by_key = {}
    for r in results:
        by_key[(r["model"], r["zero"], r["mode"])] = r
        blocked = [s["blocked"] for s in r["saves"]]
        phases = {key: statistics.mean(s["phases"][key] for s in r["saves"]) for key in r["saves"][0]["phases"]}
        backgrounds = [s["previous_background"] for s in r["saves"][1:]] + [r["last_background"]]
        background = (f"{statistics.mean(b['write'] for b in backgrounds):.2f} + "
                      f"{statistics.mean(b['upload'] for b in backgrounds):.2f}" if r["mode"] == "async" else "-")
        size = f"{r['model']} ({r['num_parameters'] / 1e6:.1f}M)"
        copy_mb = f"{r['saves'][-1]['host_copy_mb']:.0f}" if r["mode"] == "async" else "-"
        print(f"| {size} | {r['zero']} | {r['mode']} | {statistics.mean(blocked):.2f} "
              f"(max {max(blocked):.2f}) | {', '.join(f'{k} {v:.2f}' for k, v in phases.items())} | {background} "
              f"| {copy_mb} | {r['drain']:.2f} | {r['loop_seconds']:.1f} | {r['losses'][-1]:.6f} |")
    print()
    for (model, zero, mode), r in by_key.items():
        if mode == "async":
            same = r["losses"] == by_key[(model, zero, "sync")]["losses"]
            print(f"{model} ZeRO-{zero}: every step's loss equal sync vs async: {same}")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONPATH", str(REPO_ROOT))
    main()
