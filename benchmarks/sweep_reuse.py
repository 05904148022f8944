"""A 2 x 2 sweep against the same four experiments run one after another (issue 20).

    .venv/bin/python benchmarks/sweep_reuse.py              # two rounds, ~20 min on 2 cores
    .venv/bin/python benchmarks/sweep_reuse.py --rounds 1 --steps 20

Both sides run the real CLI in fresh folders, one after another, on the gpt-tiny config
with two widths x two learning rates:

    sweep     `pretrain sweep configs/gpt-tiny.yaml -o hidden_size=[32,64] -o lr=[1e-3,3e-3]
              --max-concurrent 1`: points share one store, so ingest, tokenizer and dataset
              run once, and one Ray instance serves every point
    separate  four `pretrain run configs/gpt-tiny.yaml -o hidden_size=.. -o lr=..`, each in
              its own workdir with its own Ray, as a user without sweeps would run them

Prints wall times, the ratio, and how many stage executions each side made (counted from
the manifests on disk). The sides alternate (round 1: sweep first, round 2: separate
first, ...), so that load from elsewhere on a shared machine falls on both.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))
CONFIG = "configs/gpt-tiny.yaml"
WIDTHS = (32, 64)
RATES = ("1e-3", "3e-3")


def cli(*args: str) -> float:
    env = {**os.environ, "WANDB_MODE": "disabled", "PYTHONUNBUFFERED": "1"}
    started = time.perf_counter()
    result = subprocess.run([sys.executable, "-m", "cluster.cli", *args], cwd=REPO_ROOT, env=env,
                            capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"`pretrain {' '.join(args)}` failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    return time.perf_counter() - started


def manifests(folder: Path) -> int:
    return len(list(folder.rglob("manifest.json")))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40, help="pretrain.max_steps of every point")
    parser.add_argument("--rounds", type=int, default=2, help="measurements of each side, alternating")
    args = parser.parse_args()
    common = ["-o", f"pretrain.max_steps={args.steps}"]
    times: dict[str, list[float]] = {"sweep": [], "separate": []}
    stages: dict[str, int] = {}
    for round_index in range(args.rounds):
        order = ("sweep", "separate") if round_index % 2 == 0 else ("separate", "sweep")
        for side in order:
            with tempfile.TemporaryDirectory(prefix=f"sweep-reuse-{side}-") as temp:
                seconds, stages[side] = (run_sweep if side == "sweep" else run_separately)(Path(temp), common)
            times[side].append(seconds)
            print(f"round {round_index + 1}: {side} {seconds:.0f} s", flush=True)
    sweep_s, separate_s = statistics.median(times["sweep"]), statistics.median(times["separate"])
    print(f"\n2 x 2 tiny GPTs (gpt-tiny data, {args.steps} pretraining steps, every stage; "
          f"median of {args.rounds})\n")
    print("| | wall (s) | each round (s) | stage executions |")
    print("|---|---|---|---|")
    print(f"| `pretrain sweep` (--max-concurrent 1) | {sweep_s:.0f} | "
          f"{' / '.join(f'{t:.0f}' for t in times['sweep'])} | {stages['sweep']} |")
    print(f"| four `pretrain run`s, one after another | {separate_s:.0f} | "
          f"{' / '.join(f'{t:.0f}' for t in times['separate'])} | {stages['separate']} |")
    print(f"| ratio sweep / separate | {sweep_s / separate_s:.2f} | | "
          f"{stages['sweep'] / stages['separate']:.2f} |")


def run_sweep(temp: Path, common: list[str]) -> tuple[float, int]:
    root = temp / "sweep"
    seconds = cli("sweep", CONFIG, "-o", f"workdir={root}", *common,
                  "-o", f"pretrain.model.hidden_size=[{','.join(map(str, WIDTHS))}]",
                  "-o", f"pretrain.lr=[{','.join(RATES)}]", "--max-concurrent", "1")
    return seconds, manifests(root / "store")


def run_separately(temp: Path, common: list[str]) -> tuple[float, int]:
    seconds, stage_count = 0.0, 0
    for width in WIDTHS:
        for rate in RATES:
            workdir = temp / "separate" / f"w{width}-lr{rate}"
            seconds += cli("run", CONFIG, "-o", f"workdir={workdir}", *common,
                           "-o", f"pretrain.model.hidden_size={width}", "-o", f"pretrain.lr={rate}")
            stage_count += manifests(workdir)
    return seconds, stage_count


if __name__ == "__main__":
    main()
