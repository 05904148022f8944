"""A run directory written by hand, shaped like the engine's (pipeline.json, config,
`<stage>/<fingerprint>/manifest.json`, metrics.jsonl): report, compare and dashboard
tests read it without running a pipeline."""

from __future__ import annotations

import json
import time
from pathlib import Path

import yaml

STAGES = ("ingest", "tokenizer", "dataset", "pretrain", "finetune", "evaluate", "report")
INPUTS = {"tokenizer": ("ingest",), "dataset": ("ingest", "tokenizer"),
          "pretrain": ("dataset", "tokenizer"), "finetune": ("pretrain",), "evaluate": ("pretrain",),
          "report": ("ingest", "tokenizer", "dataset", "pretrain", "finetune", "evaluate")}
METRICS = {
    "ingest": {"documents_in": 2015, "documents_out": 1229, "bytes_in": 475071, "dropped_duplicate": 131},
    "tokenizer": {"vocab_size": 2048, "fertility": 1.6656},
    "dataset": {"train_rows": 1894, "train_tokens": 121216, "validation_tokens": 3776},
    "pretrain": {"steps": 40, "final_loss": 6.77, "val_loss": 6.83, "tokens_per_second": 19312.5,
                 "resumed_from_step": 0},
    "evaluate": {"tasks": 5, "seconds_scoring": 12.4},
}
TOKENS_PER_STEP = 2048  # pretrain: 16 rows of 128 tokens
_VOCAB = "none: depends on the model's vocabulary"
_CHOICES = "chance: mean of 1/n choices"
_UNIFORM = "a uniform model over byte values"
# results.json of the evaluate stage (stages/evaluate/run.py) for a 40-step tiny GPT:
# task -> (kind, shots, examples, truncated, {metric: (value, ci95, baseline, baseline_kind,
# higher_is_better)}). LAMBADA accuracy and the byte scores clear their baselines, PIQA and
# COPA do not, SST-2 is below its majority class, and most SST-2 4-shot prompts were cut.
EVALUATION = {
    "lambada_openai": ("cloze", 0, 200, 0, {
        "perplexity": (3519.2, (2710.4, 4637.9), None, _VOCAB, False),
        "acc": (0.025, (0.0107, 0.0572), 0.0, "0: no chance level over an open vocabulary", True)}),
    "wikitext2": ("perplexity", 0, 62, 0, {
        "word_perplexity": (2215.3, (1874.6, 2642.0), None, _VOCAB, False),
        "byte_perplexity": (4.302, (4.171, 4.447), 256.0, "256: " + _UNIFORM, False),
        "bits_per_byte": (2.105, (2.061, 2.153), 8.0, "8: " + _UNIFORM, False),
        "token_perplexity": (812.4, (702.3, 951.8), None, _VOCAB, False)}),
    "piqa": ("multiple_choice", 0, 200, 0, {
        "acc": (0.535, (0.4658, 0.6029), 0.5, _CHOICES, True),
        "acc_norm": (0.55, (0.4807, 0.6174), 0.5, _CHOICES, True)}),
    "copa": ("multiple_choice", 2, 100, 0, {"acc": (0.58, (0.4821, 0.6719), 0.5, _CHOICES, True)}),
    "sst2": ("multiple_choice", 4, 200, 37, {
        "acc": (0.415, (0.3489, 0.4842), 0.54, "majority class (always choice 1)", True)}),
}


def write_run(workdir: Path, *, name: str = "synthetic", lr: float = 0.001, accuracy: float = 0.51,
              stop_before: str | None = None, fail: str | None = None, resumed: bool = False,
              run_started: float | None = None, evaluate_values: dict[str, float] | None = None,
              snapshots: bool = True, config_overrides: dict | None = None,
              pretrain_metrics: dict | None = None, selected: list[str] | None = None) -> Path:
    """Stages up to `stop_before` are finished; `fail` gets a failure.json instead of a
    manifest. `resumed` logs steps 11-15 twice, the second time with other losses.
    `evaluate_values` ("piqa/acc" -> value) replaces zero/few-shot scores (their intervals
    stay); `snapshots` writes the evaluate stage's snapshots.json (scores across training).
    `config_overrides` ({"pretrain": {"model": {...}}}) is merged key by key into the config
    (and so into the stages' manifests); `pretrain_metrics` into the pretrain manifest's metrics.
    `selected`: the stages the run selected (pipeline.json "selected", as `--only` records it)."""
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    config = {"name": name, "workdir": str(workdir), "seed": 0,
              "pretrain": {"lr": lr, "max_steps": 40}, "finetune": {"tasks": ["sst2", "mrpc"]},
              "evaluate": {"tasks": list(EVALUATION), "shots": {"copa": 2, "sst2": 4}, "max_examples": 200}}
    _merge_into(config, config_overrides or {})
    (workdir / "config.resolved.yaml").write_text(yaml.safe_dump(config))
    fingerprints = {stage: f"{stage[:4]}{abs(hash((name, stage, lr))) % 10**12:012d}" for stage in STAGES}
    now = time.time()
    (workdir / "pipeline.json").write_text(json.dumps(
        {"name": name, "config_file": "configs/synthetic.yaml", "stages": fingerprints,
         "updated": run_started if run_started is not None else now - 100,
         **({"selected": selected} if selected is not None else {})}))
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
        if stage == "evaluate":  # written last by the stage: a failed one has neither file
            metrics.update(_write_evaluation(directory, evaluate_values or {}, snapshots))
        if stage == "pretrain":
            metrics.update(pretrain_metrics or {})
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


def _merge_into(config: dict, overrides: dict) -> None:
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(config.get(key), dict):
            _merge_into(config[key], value)
        else:
            config[key] = value


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


def evaluation_results(values: dict[str, float] | None = None) -> dict:
    """EVALUATION as results.json holds it, with `values` ("task/metric") put in."""
    results = {}
    for task, (kind, shots, examples, truncated, scores) in EVALUATION.items():
        results[task] = {"task": task, "kind": kind, "shots": shots, "seed": 1234, "num_examples": examples,
                         "num_truncated": truncated, "scores": {
                             metric: {"value": (values or {}).get(f"{task}/{metric}", value), "ci95": list(ci95),
                                      "baseline": baseline, "baseline_kind": baseline_kind,
                                      "higher_is_better": higher}
                             for metric, (value, ci95, baseline, baseline_kind, higher) in scores.items()}}
    return results


def _write_evaluation(directory: Path, values: dict[str, float], snapshots: bool) -> dict:
    """results.json (and snapshots.json); returns the flat manifest metrics of the stage
    (stages/evaluate/evaluate_task.py TaskReport.metrics)."""
    results = evaluation_results(values)
    (directory / "results.json").write_text(json.dumps(results, indent=2))
    flat: dict = {}
    for task, entry in results.items():
        flat[f"{task}/num_examples"], flat[f"{task}/num_truncated"] = entry["num_examples"], entry["num_truncated"]
        for metric, score in entry["scores"].items():
            key = f"{task}/{metric}"
            flat[key], (flat[key + "_ci95_low"], flat[key + "_ci95_high"]) = score["value"], score["ci95"]
            if score["baseline"] is not None:
                flat[key + "_baseline"] = score["baseline"]
    if snapshots:
        (directory / "snapshots.json").write_text(json.dumps(snapshot_rows(results), indent=2))
    return flat


def snapshot_rows(results: dict, steps: tuple[int, ...] = (10, 20, 30, 40)) -> list[dict]:
    """stages/evaluate/snapshots.py's rows: every score at each snapshot, drifting from
    near its baseline (perplexities: three times higher) at step 0 to the final score."""
    rows = []
    for step in steps:
        progress = step / steps[-1]
        for task, entry in results.items():
            for metric, score in entry["scores"].items():
                final = score["value"]
                if score["higher_is_better"]:
                    start = score["baseline"] if score["baseline"] is not None else 0.0
                    value = start + (final - start) * progress
                else:
                    value = final * (3.0 - 2.0 * progress)
                low, high = score["ci95"]
                scale = value / final if final else 1.0
                ci95 = [value - (final - low) * scale, value + (high - final) * scale]
                rows.append({"step": step, "tokens": step * TOKENS_PER_STEP, "task": task, "metric": metric,
                             "value": value, "ci95": ci95, "baseline": score["baseline"],
                             "higher_is_better": score["higher_is_better"]})
    return rows


def write_sweep_point(sweep_root: Path, point: str, *, sweep: str = "sweep", **run_kwargs) -> Path:
    """A point of a sweep as `pretrain sweep` lays it out: `<root>/<point>/pipeline.json`
    (with "store" and "sweep") and its stage outputs in the shared `<root>/store/`;
    `run_kwargs` go to `write_run`. Writes `<root>/sweep.json` listing the points so far."""
    sweep_root = Path(sweep_root)
    workdir = write_run(sweep_root / point, **run_kwargs)
    store = sweep_root / "store"
    for stage in STAGES:
        for output in sorted((workdir / stage).glob("*")) if (workdir / stage).is_dir() else []:
            (store / stage).mkdir(parents=True, exist_ok=True)
            output.rename(store / stage / output.name)
        if (workdir / stage).is_dir():
            (workdir / stage).rmdir()
    index = json.loads((workdir / "pipeline.json").read_text())
    (workdir / "pipeline.json").write_text(json.dumps({**index, "store": "../store", "sweep": sweep}))
    sweep_file = sweep_root / "sweep.json"
    points = json.loads(sweep_file.read_text())["points"] if sweep_file.is_file() else []
    points.append({"name": point, "overrides": {}, "workdir": str(workdir)})
    sweep_file.write_text(json.dumps({"name": sweep, "points": points}))
    return workdir
