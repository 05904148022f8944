"""Where a run's models are: the folder `pretrain generate` loads, and the list a finished
`pretrain run` prints. Reads pipeline.json and the manifests only (no torch).

    locate_model("runs/demo")                         # pretrain/<fp>/model
    locate_model("runs/demo", snapshot=100)           # pretrain/<fp>/snapshots/step-0000100
    locate_model("runs/demo", task="sst2")            # finetune/<fp>/sst2/model
    format_outputs("runs/demo")                       # where the report, model/, hf/, tasks' hf/ are

Errors are ConfigError (exit code 2 at the CLI): a folder that is not a run, a stage that
is not finished (with its state and what to run), an unknown snapshot (the available
steps listed), an unknown or unfinished task (the finished ones listed).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from pipeline.config import ConfigError
from pipeline.runner import load_run_index, run_store
from storage.urls import is_url

MODEL_STAGES = ("pretrain", "finetune")  # the stages whose outputs hold models
TASK_METRICS = "metrics.json"  # a fine-tuning task's last file: its presence marks it finished


def locate_model(run_dir: str | Path, *, stage: str = "pretrain", snapshot: int | None = None,
                 task: str | None = None) -> Path:
    """The model folder: model.safetensors, model_config.json, tokenizer.json (a task's
    also head_config.json)."""
    if stage not in MODEL_STAGES:
        raise ConfigError(f"--stage {stage}: no model there; give one of {', '.join(MODEL_STAGES)}")
    if task is not None and stage == "pretrain":
        stage = "finetune"  # --task names a fine-tuned model
    if stage == "finetune" and task is None:
        raise ConfigError(f"--stage finetune holds one model per task: add --task TASK "
                          f"({_finished_tasks_hint(run_dir)})")
    if snapshot is not None and stage != "pretrain":
        raise ConfigError("--snapshot STEP picks a pretraining snapshot: leave out --task / --stage finetune")
    index = load_run_index(run_dir)
    store = run_store(run_dir, index)
    fingerprint = index.get("stages", {}).get(stage)
    if not fingerprint:
        raise ConfigError(f"{run_dir} has no {stage} stage in its pipeline.json; run it first")
    directory = store.stage_dir(stage, fingerprint)
    if stage == "finetune" and store.url is None and (directory / task / TASK_METRICS).is_file():
        # A finished task is usable while the stage's other tasks still train.
        return _task_model(directory, task)
    if not store.is_finished(stage, fingerprint):
        raise ConfigError(f"stage {stage} of {run_dir} is not finished ({_state(store, stage, fingerprint)}: no "
                          f"manifest.json in {directory}); finish it with `pretrain run "
                          f"{index.get('config_file') or 'CONFIG'} -o workdir={run_dir}`, and see every stage "
                          f"with `pretrain status {run_dir}`")
    directory = store.fetch(stage, fingerprint)
    if stage == "finetune":
        return _task_model(directory, task)
    if snapshot is None:
        return directory / "model"
    return _snapshot(directory, snapshot)


def _state(store, stage: str, fingerprint: str) -> str:
    failure = store.failure(stage, fingerprint)
    if failure:
        return f"failed: {failure.get('error', '')[:120]}"
    return "started, not finished" if store.started(stage, fingerprint) else "not run"


def _snapshot(directory: Path, step: int) -> Path:
    from stages.snapshot_index import read_snapshot_index

    entries = read_snapshot_index(directory)
    for entry in entries:
        if entry["step"] == step:
            return directory / entry["path"]
    available = ", ".join(str(e["step"]) for e in entries)
    raise ConfigError(f"--snapshot {step}: no snapshot at that step in {directory / 'snapshots'}; "
                      + (f"available steps: {available}" if available else
                         "this run kept none (set pretrain.snapshot_every to keep some)"))


def _task_model(directory: Path, task: str) -> Path:
    task_dir = directory / task
    if not (task_dir / TASK_METRICS).is_file():
        finished = finished_tasks(directory)
        raise ConfigError(f"--task {task}: no finished fine-tuning task of that name in {directory}; "
                          + (f"finished tasks: {', '.join(finished)}" if finished else "no task has finished"))
    if not (task_dir / "model").is_dir():
        raise ConfigError(f"--task {task}: {task_dir} keeps no model (the run had finetune.save_model: false); "
                          f"fine-tune again with finetune.save_model: true")
    return task_dir / "model"


def finished_tasks(finetune_dir: Path) -> list[str]:
    if not finetune_dir.is_dir():
        return []
    return sorted(p.parent.name for p in finetune_dir.glob(f"*/{TASK_METRICS}"))


def _finished_tasks_hint(run_dir: str | Path) -> str:
    try:
        index = load_run_index(run_dir)
        fingerprint = index.get("stages", {}).get("finetune")
        directory = run_store(run_dir, index).stage_dir("finetune", fingerprint) if fingerprint else None
    except ConfigError:
        return "see `pretrain status`"
    tasks = finished_tasks(directory) if directory is not None else []
    return f"finished: {', '.join(tasks)}" if tasks else "no task has finished"


# (what, stage, path in the stage's folder): what a user looks for after a run
OUTPUTS = (("report", "report", "report.html"), ("model", "pretrain", "model"),
           ("transformers model", "pretrain", "hf"))
# A first command to try, by the family in model/model_config.json
GENERATE_EXAMPLES = {"gpt": '--prompt "It was a dark and stormy night"',
                     "bert": '--prompt "It was a dark and [MASK] night."',
                     "t5": '--prompt "It was a dark and <extra_id_0> night."'}


def model_outputs(run_dir: str | Path) -> list[tuple[str, str]]:
    """(what, where) for the outputs a user wants after a run, those that exist: the
    report, the pretrained model (model/ and its transformers folder hf/), and each
    fine-tuned task's transformers folder (<task>/hf/). Local paths are shown relative to
    the current folder when under it; an object store's as URLs."""
    index = load_run_index(run_dir)
    store = run_store(run_dir, index)
    stages = index.get("stages", {})
    wanted = [(what, stage, path) for what, stage, path in OUTPUTS if stages.get(stage)]
    if stages.get("finetune"):
        wanted += [(f"{task} fine-tuned (transformers)", "finetune", f"{task}/hf")
                   for task in _tasks(store, stages["finetune"])]
    found = []
    for what, stage, path in wanted:
        fingerprint = stages[stage]
        if store.url is None:
            local = store.stage_dir(stage, fingerprint) / path
            if local.exists():
                found.append((what, _shown(local)))
        elif _listed(store.manifest(stage, fingerprint), path):
            found.append((what, f"{store.stage_url(stage, fingerprint)}/{path}"))
    return found


def format_outputs(run_dir: str | Path) -> list[str]:
    """The lines a finished `pretrain run` ends with: where its outputs are, and a
    `pretrain generate` command to try its model."""
    try:
        outputs = model_outputs(run_dir)
    except (ConfigError, OSError):  # nothing to point at is no reason to fail a finished run
        return []
    if not outputs:
        return []
    width = max(len(what) for what, _ in outputs)
    lines = ["outputs:"] + [f"  {what:<{width}}  {where}" for what, where in outputs]
    if not is_url(run_dir) and (Path(run_dir) / "latest").is_dir():
        lines.append(f"  {'latest':<{width}}  {_shown(Path(run_dir) / 'latest')}/<stage>: each stage's folder "
                     "of this run")
    model = dict(outputs).get("model")
    if model is not None and not is_url(model):
        family = _family(Path(model))
        if family in GENERATE_EXAMPLES:
            lines.append(f"try it: pretrain generate {run_dir} {GENERATE_EXAMPLES[family]}")
    return lines


def _tasks(store, fingerprint: str) -> list[str]:
    if store.url is None:
        return finished_tasks(store.stage_dir("finetune", fingerprint))
    files = [entry["path"] for entry in (store.manifest("finetune", fingerprint) or {}).get("files", [])]
    return sorted({path.split("/")[0] for path in files if path.endswith(f"/{TASK_METRICS}")})


def _listed(manifest: dict | None, path: str) -> bool:
    return any(entry["path"] == path or entry["path"].startswith(f"{path}/")
               for entry in (manifest or {}).get("files", []))


def _shown(path: Path) -> str:
    relative = os.path.relpath(path)
    return str(path) if relative.startswith("..") else relative


def _family(model_dir: Path) -> str | None:
    try:
        return json.loads((model_dir / "model_config.json").read_text(encoding="utf-8")).get("family", "gpt")
    except (OSError, ValueError):
        return None
