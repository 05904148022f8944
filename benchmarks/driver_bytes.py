"""Bytes that pass through the driver's machine, per stage, for the gpt-tiny pipeline on
an S3 workdir over a three-node simulated cluster: the code before the bulk files stayed
in the bucket (a git revision) and the code of this tree, side by side in one run.

    DATA_DIR=/work/shared/data .venv/bin/python benchmarks/driver_bytes.py --before d498a47
    .venv/bin/python benchmarks/driver_bytes.py --before d498a47 --out /tmp/driver_bytes.json

Per side: a real S3 server on loopback (moto, tests/support/s3_server.py), a
`ray.cluster_utils.Cluster` with a head of no CPUs (where the driver runs) and two nodes
of one CPU each with their own PRETRAIN_MIRROR (the cluster of
tests/support/multinode_bucket_run.py), and `pretrain run configs/gpt-tiny.yaml` with the
workdir in the bucket, every stage. The side's source tree (a `git worktree` of the
revision for "before") is what the driver and every Ray worker import.

What is counted: every byte the driver process sends to or receives from the bucket,
at s3fs (downloads `_get_file`, `_cat_file`, ranged reads of opened files; uploads
`_put_file`, `_pipe_file`, written files' parts), each put on the stage the engine was
running then (`pipeline.runner._run_stage`), or on "engine" outside one (the run's index,
planning's manifest reads); and the largest size the driver's mirror reached (listed every
50 ms). Ray's own traffic to the driver (task results, a few numbers each) is not counted.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
CONFIG = "configs/gpt-tiny.yaml"
STAGES = ("ingest", "tokenizer", "dataset", "pretrain", "finetune", "evaluate", "report")
OVERRIDES = ("-o", "pretrain.max_steps=4", "-o", "pretrain.checkpoint_every=2", "-o", "pretrain.eval_every=4",
             "-o", "finetune.max_train_examples=64", "-o", "evaluate.tasks=[copa]", "-o", "evaluate.max_examples=4")


# -- inside the driver process ---------------------------------------------------------------
def counting_driver(out: str, cli_args: list[str]) -> None:
    """Run the `pretrain` CLI in this process with s3fs counting the bytes it moves."""
    import runpy

    import s3fs
    import s3fs.core

    counts: dict[str, dict[str, int]] = {}
    current = ["engine"]

    def add(kind: str, size: int) -> None:
        entry = counts.setdefault(current[0], {"down": 0, "up": 0})
        entry[kind] += int(size or 0)

    fs_class, file_class = s3fs.S3FileSystem, s3fs.core.S3File

    def wrap(name, measure):
        original = getattr(fs_class, name)

        async def counted(self, *args, **kwargs):
            result = await original(self, *args, **kwargs)
            measure(args, kwargs, result)
            return result
        setattr(fs_class, name, counted)

    wrap("_get_file", lambda args, kwargs, result: add("down", os.path.getsize(args[1])))
    wrap("_put_file", lambda args, kwargs, result: add("up", os.path.getsize(args[0])))
    wrap("_cat_file", lambda args, kwargs, result: add("down", len(result)))
    wrap("_pipe_file", lambda args, kwargs, result: add("up", len(args[1])))
    fetch_range, upload_chunk = file_class._fetch_range, file_class._upload_chunk

    def counted_fetch(self, start, end):
        data = fetch_range(self, start, end)
        add("down", len(data))
        return data

    def counted_upload(self, final=False):
        add("up", self.buffer.tell())
        return upload_chunk(self, final)

    file_class._fetch_range, file_class._upload_chunk = counted_fetch, counted_upload

    import pipeline.runner as runner

    run_stage = runner._run_stage

    def tracked(cfg, store, decision, *args, **kwargs):
        current[0] = decision.stage
        try:
            return run_stage(cfg, store, decision, *args, **kwargs)
        finally:
            current[0] = "engine"
    runner._run_stage = tracked
    sys.argv = ["pretrain", *cli_args]
    try:
        runpy.run_module("pipeline.cli", run_name="__main__")
    finally:
        Path(out).write_text(json.dumps(counts))


# -- the benchmark ---------------------------------------------------------------------------
class MirrorPeak(threading.Thread):
    def __init__(self, root: Path):
        super().__init__(daemon=True)
        self.root, self.peak, self.stopped = root, 0, threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(0.05):
            total = 0
            for current, _, names in os.walk(self.root):
                for name in names:
                    try:
                        total += (Path(current) / name).stat().st_size
                    except OSError:
                        continue
            self.peak = max(self.peak, total)


def run_side(label: str, tree: Path, scratch: Path) -> dict:
    """One whole bucket run on a fresh cluster and server, importing `tree`."""
    from ray.cluster_utils import Cluster

    from tests.support.s3_server import make_bucket, s3_server

    os.environ["PYTHONPATH"] = str(tree)  # the raylets' workers inherit it: they import `tree`
    driver_mirror = scratch / f"{label}-driver-mirror"
    driver_mirror.mkdir(parents=True)
    os.environ["PRETRAIN_MIRROR"] = str(driver_mirror)
    counts_file = scratch / f"{label}-counts.json"
    with s3_server():
        url = f"{make_bucket(f'driver-bytes-{label}')}/gpt-tiny"
        cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
        peak = MirrorPeak(driver_mirror)
        try:
            for node in ("b", "c"):
                cluster.add_node(num_cpus=1, env_vars={"PRETRAIN_MIRROR": str(scratch / f"{label}-node-{node}")})
            cluster.wait_for_nodes()
            peak.start()
            started = time.perf_counter()
            command = [sys.executable, str(Path(__file__).resolve()), "--driver", str(counts_file), "--",
                       "run", CONFIG, "-o", f"workdir={url}", "-o", f"ray.address={cluster.address}", *OVERRIDES]
            result = subprocess.run(command, cwd=tree, env={**os.environ, "PYTHONUNBUFFERED": "1"},
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=1200)
            seconds = time.perf_counter() - started
        finally:
            peak.stopped.set()
            cluster.shutdown()
    if result.returncode != 0:
        raise SystemExit(f"{label}: the run failed:\n{result.stdout[-4000:]}")
    return {"counts": json.loads(counts_file.read_text()), "mirror_peak": peak.peak, "seconds": seconds}


def worktree(revision: str, scratch: Path) -> Path:
    path = scratch / f"tree-{revision}"
    subprocess.run(["git", "worktree", "add", "--detach", str(path), revision], cwd=REPO_ROOT, check=True,
                   stdout=subprocess.DEVNULL)
    return path


def table(sides: dict[str, dict]) -> str:
    def megabytes(value: int) -> str:
        return f"{value / 1e6:.2f}"

    lines = ["| stage | before: down MB | before: up MB | after: down MB | after: up MB | after / before |",
             "|---|---|---|---|---|---|"]
    for stage in (*STAGES, "engine", "total"):
        cells = []
        totals = []
        for side in ("before", "after"):
            counts = sides[side]["counts"]
            if stage == "total":
                down = sum(c["down"] for c in counts.values())
                up = sum(c["up"] for c in counts.values())
            else:
                down, up = counts.get(stage, {}).get("down", 0), counts.get(stage, {}).get("up", 0)
            cells += [megabytes(down), megabytes(up)]
            totals.append(down + up)
        ratio = f"{totals[1] / totals[0]:.3f}" if totals[0] else "-"
        lines.append(f"| {stage} | " + " | ".join(cells) + f" | {ratio} |")
    lines.append(f"| driver's mirror, largest | {megabytes(sides['before']['mirror_peak'])} | | "
                 f"{megabytes(sides['after']['mirror_peak'])} | | "
                 f"{sides['after']['mirror_peak'] / max(sides['before']['mirror_peak'], 1):.3f} |")
    lines.append(f"| wall seconds, whole run | {sides['before']['seconds']:.1f} | | {sides['after']['seconds']:.1f} | | "
                 f"{sides['after']['seconds'] / sides['before']['seconds']:.2f} |")
    return "\n".join(lines)


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--driver":
        counting_driver(sys.argv[2], sys.argv[4:])
        return
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", required=True, help="the git revision measured as 'before'")
    parser.add_argument("--out", help="also write the figures as JSON here")
    args = parser.parse_args()
    sys.path.insert(0, str(REPO_ROOT))
    os.environ.setdefault("DATA_DIR", str((REPO_ROOT / ".." / "shared" / "data").resolve()))
    with tempfile.TemporaryDirectory(prefix="driver-bytes-") as folder:
        scratch = Path(folder)
        before_tree = worktree(args.before, scratch)
        os.symlink(REPO_ROOT / ".venv", before_tree / ".venv")
        try:
            sides = {"before": run_side("before", before_tree, scratch),
                     "after": run_side("after", REPO_ROOT, scratch)}
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(before_tree)], cwd=REPO_ROOT,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    print(f"bytes through the driver, gpt-tiny on s3 over 3 simulated nodes (before = {args.before})")
    print(table(sides))
    if args.out:
        Path(args.out).write_text(json.dumps(sides, indent=2))


if __name__ == "__main__":
    main()
