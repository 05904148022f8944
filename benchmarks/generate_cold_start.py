"""Wall time from `pretrain generate RUN_DIR --prompt ...` to its first generated text, cold:
a fresh process each time (imports, reading the run, loading model/, decoding).

    .venv/bin/python benchmarks/generate_cold_start.py RUN_DIR [--repeats 5] [--prompt TEXT]

Reports, per start, the seconds until stdout has shown the prompt plus at least one
generated character (the first streamed token), and until the process exits; then the
median of each. For comparison, the same for transformers' pipeline("text-generation")
on the run's hf/ folder (a fresh `python -c` each time: import, load, first sample).
"""

from __future__ import annotations

import argparse
import json
import os
import selectors
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
TRANSFORMERS_SNIPPET = """
import sys
from transformers import pipeline
generator = pipeline("text-generation", model=sys.argv[1])
print(generator(sys.argv[2], max_new_tokens=20, do_sample=False)[0]["generated_text"], flush=True)
"""


def first_output(command: list[str], wanted: int) -> tuple[float, float]:
    """(seconds until stdout held `wanted` characters, seconds until exit)."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1",
           "PYTHONPATH": os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH")) if p)}
    start = time.perf_counter()
    process = subprocess.Popen(command, cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    selector = selectors.DefaultSelector()
    selector.register(process.stdout, selectors.EVENT_READ)
    seen, first = b"", None
    while first is None:
        selector.select()
        chunk = os.read(process.stdout.fileno(), 4096)
        if not chunk:
            break
        seen += chunk
        if len(seen.decode(errors="ignore")) >= wanted:
            first = time.perf_counter() - start
    process.stdout.read()
    process.wait()
    total = time.perf_counter() - start
    if process.returncode != 0:
        raise SystemExit(f"{' '.join(command)} exited with {process.returncode}")
    return first if first is not None else total, total


def hf_folder(run: Path) -> Path:
    index = json.loads((run / "pipeline.json").read_text())
    return run / index.get("store", ".") / "pretrain" / index["stages"]["pretrain"] / "hf"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--prompt", default="It was a dark and stormy night")
    args = parser.parse_args()
    ours = [sys.executable, "-m", "pipeline.cli", "generate", args.run_dir, "--prompt", args.prompt,
            "--max-new-tokens", "20", "--device", "cpu"]
    theirs = [sys.executable, "-c", TRANSFORMERS_SNIPPET, str(hf_folder(Path(args.run_dir))), args.prompt]
    results = {"pretrain generate": [], "transformers pipeline": []}
    for _ in range(args.repeats):  # alternating, so that load from other work hits both
        results["pretrain generate"].append(first_output(ours, len(args.prompt) + 1))
        results["transformers pipeline"].append(first_output(theirs, len(args.prompt) + 1))
    print(f"{args.run_dir}, prompt {args.prompt!r}, {args.repeats} cold starts each (median; all runs)")
    print()
    print("| command | first text (s) | exit (s) | first text, every start (s) |")
    print("|---|---|---|---|")
    for name, timings in results.items():
        firsts = [f for f, _ in timings]
        print(f"| {name} | {statistics.median(firsts):.2f} | {statistics.median(t for _, t in timings):.2f} | "
              f"{', '.join(f'{f:.2f}' for f in firsts)} |")


if __name__ == "__main__":
    main()
