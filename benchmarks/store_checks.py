"""What the stage store's trust checks cost, side by side in one run:

    .venv/bin/python benchmarks/store_checks.py [--files 10000] [--verify-mb 400] [--repeats 3]

(1) `pretrain plan` (the real CLI, a fresh interpreter each time) on an experiment whose
    ingest source is a folder of --files small text files: cold (every file hashed), warm
    with nothing changed (a stat per file, no reads), and warm after one file changed (one
    file re-hashed). Also the same three in-process (`plan()`), without interpreter start-up.
(2) `pretrain verify` on a run directory holding --verify-mb of output in 64 MB files vs
    `sha256sum` of the same files (both read every byte; the page cache is warmed first so
    both read from memory). The ratio is verify / sha256sum wall time.

Best of --repeats for each; the machine is shared, so read small differences as noise.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from pipeline.config import load_config  # noqa: E402
from pipeline.planner import plan  # noqa: E402
from storage.local_store import inventory, write_json_atomic  # noqa: E402


def make_corpus(root: Path, files: int) -> Path:
    corpus = root / "data" / "corpus"
    corpus.mkdir(parents=True)
    for i in range(files):
        (corpus / f"doc-{i:05d}.txt").write_text(f"Document number {i}. " * 20 + "\n")
    config = root / "experiment.yaml"
    config.write_text(f"name: bench\nworkdir: {root / 'work'}\ndata_dir: {root / 'data'}\n"
                      "ingest:\n  sources:\n    - path: corpus\n")
    return config


def timed(function) -> float:
    start = time.perf_counter()
    function()
    return time.perf_counter() - start


def cli_plan(config: Path) -> None:
    result = subprocess.run([sys.executable, "-m", "pipeline.cli", "plan", str(config)], cwd=REPO,
                            capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(result.stderr)


def touch_one(config: Path, round_: int) -> None:
    path = config.parent / "data" / "corpus" / "doc-00042.txt"
    path.write_text(f"changed {round_}\n")


def bench_plan(files: int, repeats: int) -> list[tuple[str, float, float]]:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        config = make_corpus(Path(tmp), files)
        cache = Path(tmp) / "work" / ".cache" / "input-hashes.json"
        cold_cli = cold_api = warm_cli = warm_api = one_cli = one_api = float("inf")
        for round_ in range(repeats):
            cache.unlink(missing_ok=True)
            cold_cli = min(cold_cli, timed(lambda: cli_plan(config)))
            cache.unlink(missing_ok=True)
            cold_api = min(cold_api, timed(lambda: plan(load_config(config))))
            warm_cli = min(warm_cli, timed(lambda: cli_plan(config)))
            warm_api = min(warm_api, timed(lambda: plan(load_config(config))))
            touch_one(config, 2 * round_)
            one_cli = min(one_cli, timed(lambda: cli_plan(config)))
            touch_one(config, 2 * round_ + 1)
            one_api = min(one_api, timed(lambda: plan(load_config(config))))
        rows += [("cold: every file hashed", cold_cli, cold_api),
                 ("warm: nothing changed", warm_cli, warm_api),
                 ("warm: one file changed", one_cli, one_api)]
    return rows


def bench_verify(total_mb: int, repeats: int) -> tuple[float, float, int]:
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "run"
        stage_dir = run_dir / "dataset" / "fp"
        stage_dir.mkdir(parents=True)
        block = os.urandom(1 << 20)
        for i in range(max(1, total_mb // 64)):
            with open(stage_dir / f"shard-{i:03d}.bin", "wb") as f:
                for _ in range(min(64, total_mb)):
                    f.write(block)
        files = inventory(stage_dir)
        write_json_atomic(stage_dir / "manifest.json", {"files": files})
        write_json_atomic(run_dir / "pipeline.json", {"stages": {"dataset": "fp"}})
        paths = [str(stage_dir / f["path"]) for f in files]
        subprocess.run(["cat", *paths], stdout=subprocess.DEVNULL, check=True)  # warm the page cache
        ours = theirs = float("inf")
        for _ in range(repeats):
            ours = min(ours, timed(lambda: subprocess.run(
                [sys.executable, "-m", "pipeline.cli", "verify", str(run_dir)], cwd=REPO,
                capture_output=True, check=True)))
            theirs = min(theirs, timed(lambda: subprocess.run(
                ["sha256sum", *paths], capture_output=True, check=True)))
        return ours, theirs, sum(f["bytes"] for f in files)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--verify-mb", type=int, default=400)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    print(f"## plan with {args.files} input files (best of {args.repeats})\n")
    print("| case | `pretrain plan` CLI (s) | `plan()` in process (s) |\n|---|---:|---:|")
    for name, cli, api in bench_plan(args.files, args.repeats):
        print(f"| {name} | {cli:.2f} | {api:.2f} |")
    ours, theirs, size = bench_verify(args.verify_mb, args.repeats)
    print(f"\n## verify {size / 1e6:.0f} MB (best of {args.repeats}, page cache warm)\n")
    print("| tool | wall (s) | MB/s |\n|---|---:|---:|")
    print(f"| `pretrain verify` | {ours:.2f} | {size / ours / 1e6:.0f} |")
    print(f"| `sha256sum` | {theirs:.2f} | {size / theirs / 1e6:.0f} |")
    print(f"\nratio verify / sha256sum: {ours / theirs:.2f}")
    print(json.dumps({"cpu_count": os.cpu_count()}))


if __name__ == "__main__":
    main()
