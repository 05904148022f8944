"""The stage graph: which stages exist, what each reads, and how to call it.

Stage code is named by import path and imported only when the stage runs, so building
the graph (for `plan` and `status`) never imports torch, Ray or DeepSpeed.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Callable


@dataclass(frozen=True, kw_only=True)
class StageSpec:
    """One stage. Bump `code_version` when a change to the stage's code changes its
    output; that invalidates its cached results and everything downstream."""

    name: str
    entry: str  # "package.module:function"
    inputs: tuple[str, ...] = ()
    code_version: str = "1"
    # Top-level experiment keys the stage reads; they join its fingerprint.
    experiment_keys: tuple[str, ...] = ()
    # Whether an interrupted attempt's partial output is kept for the stage to resume
    # from (checkpoints, finished shards); otherwise the directory is cleared first.
    resumes: bool = False
    # Sub-directories that hold the stage's own progress (checkpoints), not outputs:
    # left out of the manifest's file list.
    scratch_dirs: tuple[str, ...] = ()
    # Whether the stage runs on Ray (the engine starts or connects to Ray before it).
    needs_ray: bool = True
    # Metrics `pretrain status` shows for the stage (all "task/metric" scores if empty).
    summary_metrics: tuple[str, ...] = field(default=())
    # "module:function" giving {stable name: path} of the files the stage reads besides
    # its input stages (corpus files, task files, a user's DeepSpeed JSON). Their
    # contents join the fingerprint (pipeline.input_files), so editing a file re-runs the
    # stage while moving data_dir with the same bytes does not. The module must be light
    # (no torch): `plan` imports it.
    input_files: str | None = None
    # Whether the stage reads data_dir (the runner checks it exists before running).
    reads_data_dir: bool = False
    # What a damaged output file takes with it before a resuming rerun: "top" = its
    # top-level entry under the stage directory (a fine-tuning task's folder, model/),
    # "file" = the file alone (the dataset stage rebuilds any shard whose file is gone).
    damage_scope: str = "top"
    # On an object-store workdir, the stage's bulky outputs (shards, weights): fnmatch
    # patterns relative to its directory, `*` crossing `/`. A file matching one is never
    # brought to the driver's machine: the task that writes it on another node uploads it
    # and reports its size and sha256 (the commit lists it from that report), and a task
    # that reads it fetches it where it runs. Code that runs in the driver must not open
    # such files of its inputs or of its own stage; it hands them to a task.
    bulk_files: tuple[str, ...] = ()

    def load(self) -> Callable:
        module_name, _, function_name = self.entry.partition(":")
        return getattr(importlib.import_module(module_name), function_name)

    def list_input_files(self, experiment) -> dict[str, str]:
        if self.input_files is None:
            return {}
        module_name, _, function_name = self.input_files.partition(":")
        return getattr(importlib.import_module(module_name), function_name)(experiment)


STAGES: tuple[StageSpec, ...] = (
    # ingest v2: sentences column, filters, near-dedup; v3: metadata column, CSV / Parquet /
    # Hugging Face sources. tokenizer v2: wordpiece, unigram.
    StageSpec(name="ingest", entry="stages.ingest.run:run", code_version="3",
              bulk_files=("documents/*", "staging/*"),
              input_files="stages.ingest.inputs:input_files", reads_data_dir=True,
              summary_metrics=("documents_out", "bytes_out", "dropped_duplicate")),
    StageSpec(name="tokenizer", entry="stages.tokenizer.run:run", inputs=("ingest",), code_version="2",
              experiment_keys=("seed",), input_files="stages.tokenizer.inputs:input_files",
              summary_metrics=("vocab_size", "fertility")),
    # dataset v2: mlm and span objectives, per-split stats in index.json.
    # dataset v3: mlm pairs and masks drawn by the array code (other bytes, same rules).
    StageSpec(name="dataset", entry="stages.dataset.run:run", inputs=("ingest", "tokenizer"),
              code_version="3", experiment_keys=("seed",), resumes=True, damage_scope="file",
              bulk_files=("train/*", "validation/*", "*/train/*", "*/validation/*"),
              summary_metrics=("train_rows", "train_tokens", "validation_tokens")),
    # pretrain v2: also writes hf/, a Hugging Face folder of the final weights; v3: bert/t5
    # families (mlm + nsp/sop, span), per-objective metrics, MFU, data wait time.
    StageSpec(name="pretrain", entry="stages.pretrain.run:run", inputs=("dataset", "tokenizer"),
              code_version="3", experiment_keys=("seed",), resumes=True, scratch_dirs=("ray",),
              input_files="stages.pretrain.inputs:input_files", bulk_files=("*.safetensors",),
              summary_metrics=("steps", "final_loss", "val_loss", "tokens_per_second")),
    # finetune v2: every task also writes hf/, its transformers folder (stages.finetune.hf_export).
    StageSpec(name="finetune", entry="stages.finetune.run:run", inputs=("pretrain",), code_version="2",
              experiment_keys=("seed",), resumes=True, scratch_dirs=("ray",),
              input_files="stages.finetune.inputs:input_files", reads_data_dir=True,
              bulk_files=("*.safetensors", "*.npz"),
              summary_metrics=()),
    StageSpec(name="evaluate", entry="stages.evaluate.run:run", inputs=("pretrain",),
              input_files="stages.evaluate.inputs:input_files", reads_data_dir=True,
              summary_metrics=()),
    # report v2: adds report.html (plots, lineage, stats); v3: the evaluate stage's scores.
    StageSpec(name="report", entry="stages.report.run:run", needs_ray=False, code_version="3",
              inputs=("ingest", "tokenizer", "dataset", "pretrain", "finetune", "evaluate")),
)

STAGE_NAMES = tuple(spec.name for spec in STAGES)
BY_NAME = {spec.name: spec for spec in STAGES}


def downstream_of(name: str) -> set[str]:
    """`name` and every stage that reads it, directly or not."""
    found = {name}
    for spec in STAGES:  # STAGES is in topological order
        if any(i in found for i in spec.inputs):
            found.add(spec.name)
    return found


def upstream_of(name: str) -> set[str]:
    """Every stage `name` reads, directly or not (not `name` itself)."""
    found: set[str] = set()
    for input_name in BY_NAME[name].inputs:
        found |= {input_name} | upstream_of(input_name)
    return found
