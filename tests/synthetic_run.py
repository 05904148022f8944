"""A run directory written by hand, shaped like the engine's (pipeline.json, config,
`<stage>/<fingerprint>/manifest.json`, metrics.jsonl): report, compare and dashboard
tests read it without running a pipeline."""

from __future__ import annotations

import json
import time
from pathlib import Path

import yaml

STAGES = ("ingest", "tokenizer", "dataset", "pretrain", "finetune", "report")
INPUTS = {"tokenizer": ("ingest",), "dataset": ("ingest", "tokenizer"),
          "pretrain": ("dataset", "tokenizer"), "finetune": ("pretrain",),
          "report": ("ingest", "tokenizer", "dataset", "pretrain", "finetune")}
METRICS = {
    "ingest": {"documents_in": 2015, "documents_out": 1229, "bytes_in": 475071, "dropped_duplicate": 131},
    "tokenizer": {"vocab_size": 2048, "fertility": 1.6656},
    "dataset": {"train_rows": 1894, "train_tokens": 121216, "validation_tokens": 3776},
    "pretrain": {"steps": 40, "final_loss": 6.77, "val_loss": 6.83, "tokens_per_second": 19312.5,
                 "resumed_from_step": 0},
}


def write_run(workdir: Path, *, name: str = "synthetic", lr: float = 0.001, accuracy: float = 0.51,
              stop_before: str | None = None, fail: str | None = None, resumed: bool = False,
              run_started: float | None = None) -> Path:
    """Stages up to `stop_before` are finished; `fail` gets a failure.json instead of a
    manifest. `resumed` logs steps 11-15 twice, the second time with other losses."""
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    config = {"name": name, "workdir": str(workdir), "seed": 0,
              "pretrain": {"lr": lr, "max_steps": 40}, "finetune": {"tasks": ["sst2", "mrpc"]}}
    (workdir / "config.resolved.yaml").write_text(yaml.safe_dump(config))
    fingerprints = {stage: f"{stage[:4]}{abs(hash((name, stage, lr))) % 10**12:012d}" for stage in STAGES}
    now = time.time()
    (workdir / "pipeline.json").write_text(json.dumps(
        {"name": name, "config_file": "configs/synthetic.yaml", "stages": fingerprints,
         "updated": run_started if run_started is not None else now - 100}))
    for i, stage in enumerate(STAGES):
        if stage == stop_before:
            break
        directory = workdir / stage / fingerprints[stage]
        directory.mkdir(parents=True)
        if stage == "pretrain":
            _write_pretrain_metrics(directory, lr, resumed)
        if stage == "finetune":
            _write_finetune_metrics(directory)
        if stage == fail:
            (directory / "failure.json").write_text(json.dumps(
                {"stage": stage, "error": "RuntimeError: CUDA <out> of memory | boom", "time": now}))
            break
        metrics = dict(METRICS.get(stage, {}))
        if stage == "pretrain" and resumed:
            metrics["resumed_from_step"] = 10
        if stage == "finetune":
            metrics = {"sst2/accuracy": accuracy, "sst2/train_examples": 256,
                       "mrpc/accuracy": 0.68, "mrpc/f1": 0.80}
        manifest = {
            "stage": stage, "fingerprint": fingerprints[stage], "code_version": "1",
            "inputs": {n: fingerprints[n] for n in INPUTS.get(stage, ())},
            "config": config.get(stage, {}), "start_time": now - 90 + i, "end_time": now - 89 + i,
            "wall_seconds": 1.0, "host": "testhost", "python": "3.11.7",
            "libraries": {"torch": "2.13.0+cpu", "ray": "2.60.0"}, "metrics": metrics,
        }
        (directory / "manifest.json").write_text(json.dumps(manifest))
    return workdir


def _write_pretrain_metrics(directory: Path, lr: float, resumed: bool) -> None:
    def record(step: int) -> dict:
        r = {"time": 1.0 * step, "step": step, "loss": 8.0 - step * lr * 50, "lr": lr,
             "tokens_per_s": 1000.0 + step}
        if step % 20 == 0:
            r["val_loss"] = 8.1 - step * lr * 50
        return r

    lines = [record(step) for step in range(1, 41)]
    if resumed:
        # The first attempt logged steps 1-15 and died; the checkpoint was at step 10,
        # so the rerun logged 11-40 again. Its records (the later ones) are the truth.
        crashed = [{**record(step), "loss": 99.0} for step in range(11, 16)]
        lines = lines[:10] + crashed + lines[10:]
    (directory / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))


def _write_finetune_metrics(directory: Path) -> None:
    records = []
    for task in ("sst2", "mrpc"):
        records += [{"task": task, "step": s, "epoch": 0, "loss": 0.7 - s * 0.01, "lr": 1e-4,
                     "examples_per_s": 500.0} for s in (10, 20, 30)]
        records.append({"task": task, "dev_accuracy": 0.5})
    (directory / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
