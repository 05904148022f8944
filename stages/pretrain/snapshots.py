"""Snapshots of the weights during pretraining (pretrain.snapshot_every), for scoring the
model across training (stages/evaluate/snapshots.py reads them).

    <output_dir>/snapshots/step-0000500/   model.safetensors, model_config.json, tokenizer.json
                                           (what model/ holds)
    <output_dir>/snapshots/index.json      [{"step": 500, "tokens": 2048000,
                                             "path": "snapshots/step-0000500"}, ...]

A folder is written under a temporary name (step-0000500.partial) and renamed when it is
complete, so a killed run never leaves a snapshot that looks finished, and a resumed run
keeps the snapshots that exist. index.json lists each snapshot once, in step order, with
the training tokens seen up to it; "path" is relative to the stage's output directory.
The index is rewritten (temporary file, then rename) after each snapshot.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from stages.snapshot_index import INDEX_NAME, SNAPSHOTS_DIR, read_snapshot_index

PARTIAL_SUFFIX = ".partial"


def snapshot_name(step: int) -> str:
    return f"step-{step:07d}"


def snapshot_path(output_dir: Path, step: int) -> Path:
    return Path(output_dir) / SNAPSHOTS_DIR / snapshot_name(step)


def write_model_folder(model, tokenizer_path: Path, final: Path) -> None:
    """save_pretrained(model) and tokenizer.json into `final`: written beside it as
    <final>.partial, then renamed into place (an existing `final` is replaced)."""
    from stages.models import save_pretrained

    staging = final.with_name(final.name + PARTIAL_SUFFIX)
    shutil.rmtree(staging, ignore_errors=True)
    save_pretrained(model, staging)
    shutil.copy2(tokenizer_path, staging / "tokenizer.json")
    shutil.rmtree(final, ignore_errors=True)
    os.replace(staging, final)


def remove_partial_snapshots(output_dir: Path) -> None:
    """Delete what a killed run left half-written (never listed in the index)."""
    for staging in (Path(output_dir) / SNAPSHOTS_DIR).glob(f"*{PARTIAL_SUFFIX}"):
        if staging.is_dir():
            shutil.rmtree(staging, ignore_errors=True)
        else:
            staging.unlink(missing_ok=True)


def record_snapshot(output_dir: Path, step: int, tokens: int) -> None:
    """List the snapshot of `step` in index.json unless it is listed already (a resumed
    run keeps what an earlier attempt recorded, as it keeps the folder)."""
    entries = read_snapshot_index(output_dir)
    if any(entry["step"] == step for entry in entries):
        return
    entries.append({"step": step, "tokens": tokens, "path": f"{SNAPSHOTS_DIR}/{snapshot_name(step)}"})
    entries.sort(key=lambda entry: entry["step"])
    path = Path(output_dir) / SNAPSHOTS_DIR / INDEX_NAME
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = path.with_name(path.name + PARTIAL_SUFFIX)
    staging.write_text(json.dumps(entries, indent=2) + "\n", encoding="utf-8")
    os.replace(staging, path)
