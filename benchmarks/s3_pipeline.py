"""The whole gpt-tiny pipeline with its workdir on an S3 server vs on local disk.

    DATA_DIR=/work/shared/data .venv/bin/python benchmarks/s3_pipeline.py       # 2 rounds, ~10 min on 2 cores
    .venv/bin/python benchmarks/s3_pipeline.py --rounds 1 --out /tmp/s3_pipeline.json
    .venv/bin/python benchmarks/s3_pipeline.py --two-nodes      # both sides on one 2-node cluster

One process starts a real S3 server (moto, tests/support/s3_server.py) on loopback and creates one
bucket; then, per round, both sides run the real CLI as a subprocess, each with its own
local Ray, on configs/gpt-tiny.yaml, every stage:

    local   `pretrain run configs/gpt-tiny.yaml -o workdir=<fresh temporary folder>`
    s3      `pretrain run configs/gpt-tiny.yaml -o workdir=s3://<bucket>/round-<i>`, with
            PRETRAIN_MIRROR set to a fresh temporary folder, so no local mirror is reused
            from an earlier round; the subprocess finds the server through the inherited
            AWS_ENDPOINT_URL and credentials, as a MinIO user's run would

Measured per run: the wall clock of the whole subprocess; per stage, the seconds the stage
reports ("[stage] done in X s", the manifest's wall_seconds) and the seconds the driver
saw between the stage's "running" and "done" lines (that interval also holds what the
store does around the stage: fetching inputs into the mirror, uploading at commit); and,
after the s3 run, the objects and bytes under its prefix in the bucket (s3fs
`find(detail=True)`), next to the bytes of the local run's workdir.

With --two-nodes, both sides run on one `ray.cluster_utils.Cluster` of two nodes with one
CPU each instead of their own local Ray: the head (where the CLI runs) and node B, whose
workers have their own PRETRAIN_MIRROR. The local side's tasks share the workdir through
this machine's disk, as on a shared file system; the s3 side's tasks on node B fetch and
upload through the bucket (storage/node_transfer): its cost is what the ratio shows. Node B's
work log (tasks per stage, files fetched and uploaded) is printed after each s3 run.

The sides alternate (round 1: local first, round 2: s3 first, ...) so that load from
elsewhere on a shared machine falls on both; the table shows medians over the rounds and
ratio = s3 / local (above 1: the object store is slower). The S3 server runs in a thread
of this process, on the same cores as the pipeline: its request handling is counted in
the s3 side, as a co-located MinIO's would be, but a remote store's network latency is not.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))
CONFIG = "configs/gpt-tiny.yaml"
BUCKET_PREFIX = "pipeline-bench"
LINE = re.compile(r"^\[(?P<stage>[^\]]+)\] (?P<what>running|done in (?P<seconds>[0-9.]+)\s*s)")


def cli_run(workdir: str, extra_env: dict[str, str], overrides: list[str]) -> dict:
    """One `pretrain run` as a subprocess; its wall clock and per-stage seconds."""
    env = {**os.environ, "WANDB_MODE": "disabled", "PYTHONUNBUFFERED": "1", **extra_env}
    args = [sys.executable, "-m", "pipeline.cli", "run", CONFIG, "-o", f"workdir={workdir}", *overrides]
    started = time.perf_counter()
    process = subprocess.Popen(args, cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, bufsize=1)
    output: list[str] = []
    running_at: dict[str, float] = {}
    reported: dict[str, float] = {}
    observed: dict[str, float] = {}
    assert process.stdout is not None
    for line in process.stdout:
        now = time.perf_counter()
        output.append(line)
        match = LINE.match(line.strip())
        if not match:
            continue
        stage = match["stage"]
        if match["what"] == "running":
            running_at[stage] = now
        else:
            reported[stage] = float(match["seconds"])
            if stage in running_at:
                observed[stage] = now - running_at[stage]
    returncode = process.wait()
    wall = time.perf_counter() - started
    if returncode != 0:
        raise SystemExit(f"`{' '.join(args[1:])}` failed (exit {returncode}):\n{''.join(output)[-8000:]}")
    if not reported:
        raise SystemExit(f"`{' '.join(args[1:])}` ran no stage:\n{''.join(output)[-3000:]}")
    return {"wall_s": wall, "stages": reported, "driver_stages": observed}


def folder_bytes(folder: Path) -> tuple[int, int]:
    files = [p for p in folder.rglob("*") if p.is_file()]
    return len(files), sum(p.stat().st_size for p in files)


def bucket_contents(url: str) -> dict:
    """Objects and bytes under `url`, in total and per top-level prefix (stage)."""
    from storage.object_keys import filesystem

    fs, root = filesystem(url)
    fs.invalidate_cache()
    found = fs.find(root, detail=True)
    per_prefix: dict[str, list[int]] = {}
    for path, info in found.items():
        top = path[len(root):].strip("/").split("/", 1)[0]
        counts = per_prefix.setdefault(top, [0, 0])
        counts[0] += 1
        counts[1] += int(info.get("size") or 0)
    return {"objects": len(found), "bytes": sum(int(i.get("size") or 0) for i in found.values()),
            "per_prefix": per_prefix}


def node_work(mirror: Path) -> dict[str, list[int]]:
    """Per stage: [tasks, files fetched, files uploaded] on a node, from its work log."""
    work: dict[str, list[int]] = {}
    for log in mirror.glob("*/.node-transfer/work.jsonl"):
        for line in log.read_text().splitlines():
            entry = json.loads(line)
            counts = work.setdefault(entry["stage"].split("/", 1)[0], [0, 0, 0])
            counts[0] += 1
            counts[1] += entry["fetched"]
            counts[2] += entry["uploaded"]
    return work


def run_side(side: str, round_index: int, overrides: list[str], node_mirror: Path | None = None,
             bucket_url: str = "") -> dict:
    with tempfile.TemporaryDirectory(prefix=f"s3-pipeline-{side}-") as temp:
        if side == "local":
            workdir = Path(temp) / "run"
            result = cli_run(str(workdir), {}, overrides)
            result["objects"], result["bytes"] = folder_bytes(workdir)
        else:
            url = f"{bucket_url}/round-{round_index + 1}"
            result = cli_run(url, {"PRETRAIN_MIRROR": str(Path(temp) / "mirror")}, overrides)
            contents = bucket_contents(url)
            result.update(contents)
            result["mirror_objects"], result["mirror_bytes"] = folder_bytes(Path(temp) / "mirror")
            if node_mirror is not None:
                result["node_b_work"] = node_work(node_mirror)
                print(f"node B's work (stage: [tasks, fetched, uploaded]): {result['node_b_work']}", flush=True)
    return result


@contextlib.contextmanager
def two_node_cluster(node_mirror: Path):
    """A head and node B with one CPU each; node B's workers have their own mirror."""
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    try:
        cluster.add_node(num_cpus=1, env_vars={"PRETRAIN_MIRROR": str(node_mirror)})
        cluster.wait_for_nodes()
        yield cluster.address
    finally:
        cluster.shutdown()


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}" if b > 0 and a == a and b == b else "-"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2, help="measurements of each side, alternating")
    parser.add_argument("--steps", type=int, default=None,
                        help="pretrain.max_steps (default: the config's)")
    parser.add_argument("--out", type=Path, default=None, help="write the raw results as JSON here")
    parser.add_argument("--two-nodes", action="store_true",
                        help="both sides on one two-node Ray cluster (node B with its own mirror)")
    args = parser.parse_args()
    os.environ.setdefault("DATA_DIR", str(REPO_ROOT.parent / "shared" / "data"))
    overrides = ["-o", f"pretrain.max_steps={args.steps}"] if args.steps else []

    from tests.support.s3_server import make_bucket, s3_server

    results: dict[str, list[dict]] = {"local": [], "s3": []}
    with s3_server() as endpoint, tempfile.TemporaryDirectory(prefix="s3-pipeline-node-b-") as node_b, \
            (two_node_cluster(Path(node_b)) if args.two_nodes else contextlib.nullcontext()) as address:
        bucket_url = make_bucket(BUCKET_PREFIX)
        print(f"S3 server at {endpoint}, bucket {bucket_url}", flush=True)
        if address:
            overrides += ["-o", f"ray.address={address}"]
        for round_index in range(args.rounds):
            order = ("local", "s3") if round_index % 2 == 0 else ("s3", "local")
            for side in order:
                if address:  # each s3 round's node-B work alone
                    shutil.rmtree(node_b, ignore_errors=True)
                    Path(node_b).mkdir()
                result = run_side(side, round_index, overrides, Path(node_b) if address else None, bucket_url)
                results[side].append(result)
                print(f"round {round_index + 1}: {side} {result['wall_s']:.1f} s, "
                      f"{result['objects']} files / {result['bytes'] / 1e6:.1f} MB", flush=True)
    report(results, args.rounds)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=2) + "\n")
        print(f"\nraw results: {args.out}")


def report(results: dict[str, list[dict]], rounds: int) -> None:
    local, s3 = results["local"], results["s3"]
    stages = list(dict.fromkeys(stage for r in local + s3 for stage in r["stages"]))

    def stage_median(side: list[dict], stage: str, key: str) -> float:
        return median([r[key][stage] for r in side if stage in r[key]])

    print(f"\ngpt-tiny, every stage, workdir on a local moto S3 server vs local disk "
          f"(median of {rounds}; ratio = s3 / local)\n")
    print("| stage | local s | s3 s | ratio | local s (driver) | s3 s (driver) | ratio (driver) |")
    print("|---|---|---|---|---|---|---|")
    for stage in stages:
        lr, sr = stage_median(local, stage, "stages"), stage_median(s3, stage, "stages")
        ld, sd = stage_median(local, stage, "driver_stages"), stage_median(s3, stage, "driver_stages")
        print(f"| {stage} | {lr:.1f} | {sr:.1f} | {ratio(sr, lr)} | {ld:.1f} | {sd:.1f} | {ratio(sd, ld)} |")
    lw, sw = median([r["wall_s"] for r in local]), median([r["wall_s"] for r in s3])
    print(f"| **whole run (wall clock)** | **{lw:.1f}** | **{sw:.1f}** | **{ratio(sw, lw)}** | | | |")
    local_rounds = " / ".join(f"{r['wall_s']:.1f}" for r in local)
    s3_rounds = " / ".join(f"{r['wall_s']:.1f}" for r in s3)
    print(f"\neach round, whole run (s): local {local_rounds}; s3 {s3_rounds}")
    print("\n| | files / objects | MB |")
    print("|---|---|---|")
    for i, r in enumerate(local):
        print(f"| local workdir, round {i + 1} | {r['objects']} | {r['bytes'] / 1e6:.2f} |")
    for i, r in enumerate(s3):
        print(f"| bucket prefix (uploaded), round {i + 1} | {r['objects']} | {r['bytes'] / 1e6:.2f} |")
        print(f"| local mirror, round {i + 1} | {r['mirror_objects']} | {r['mirror_bytes'] / 1e6:.2f} |")
    if s3:
        print("\nuploaded per top-level prefix (last s3 round):\n")
        print("| prefix | objects | MB |")
        print("|---|---|---|")
        for prefix, (count, size) in sorted(s3[-1]["per_prefix"].items()):
            print(f"| {prefix} | {count} | {size / 1e6:.2f} |")


if __name__ == "__main__":
    main()
