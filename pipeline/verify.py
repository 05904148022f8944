"""`pretrain verify RUN_DIR`: compare every output file of a run with its manifest.

    pretrain verify runs/demo             # sizes and sha256 of every stage's files
    pretrain verify runs/demo --stage dataset

Reads the run's latest fingerprints from pipeline.json, like `status`. Exit 0 when every
finished stage is intact, 1 when something is damaged (each file named, with the fix).
For a run in a bucket, this machine's copies of its files (the mirror) are hashed too: a
copy with other bytes than the manifest's is named and removed (the bucket's stays
intact, and the next run that reads the file downloads it again), which is no damage to
the run itself.
"""

from __future__ import annotations

import time
from pathlib import Path

from pipeline.graph import STAGE_NAMES
from pipeline.runner import load_run_index, run_store
from pipeline.status import format_table


def verify_run(run_dir: Path | str, stages: list[str] | None = None, echo=print) -> int:
    index = load_run_index(run_dir)
    store = run_store(run_dir, index)
    rows, damaged_stages, total_bytes = [], [], 0
    started = time.perf_counter()
    for name in stages or STAGE_NAMES:
        fp = index["stages"].get(name, "")
        manifest = store.manifest(name, fp) if fp else None
        if manifest is None:
            rows.append([name, fp or "-", "-", "-", "not finished"])
            continue
        files = manifest.get("files", [])
        size = sum(entry.get("bytes", 0) for entry in files)
        total_bytes += size
        damage = store.damaged(name, fp, deep=True, manifest=manifest)
        if damage:
            damaged_stages.append(name)
            where = store.stage_url(name, fp) or store.stage_dir(name, fp)
            for item in damage:
                echo(f"[{name}] damaged: {where}/{item.path} {item.problem}")
        removed = getattr(store, "removed_copies", {}).get((name, fp), [])
        for item in removed:
            echo(f"[{name}] warning: this machine's copy {store.stage_dir(name, fp) / item.path} of "
                 f"{store.stage_url(name, fp)}/{item.path} {item.problem}; removed it (the bucket's copy "
                 f"is intact; the next run that reads it downloads it again)")
        state = f"DAMAGED ({len(damage)} files)" if damage else "ok"
        if removed:
            state += f" ({len(removed)} local {'copy' if len(removed) == 1 else 'copies'} removed)"
        rows.append([name, fp, str(len(files)), _mb(size), state])
    seconds = time.perf_counter() - started
    echo(format_table(["stage", "fingerprint", "files", "size", "state"], rows))
    echo(f"checked {_mb(total_bytes)} in {seconds:.1f}s ({total_bytes / max(seconds, 1e-9) / 1e6:.0f} MB/s)")
    if damaged_stages:
        config = index.get("config_file") or "CONFIG"
        echo(f"error: damaged output in {', '.join(damaged_stages)}; `pretrain run {config} --verify` "
             f"removes the damaged files and rebuilds them (or `--force {damaged_stages[0]}` to start "
             "that stage over)")
        return 1
    return 0


def _mb(size: int) -> str:
    return f"{size / 1e6:.1f} MB"
