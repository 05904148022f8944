"""Scores across training: every snapshot the pretrain stage wrote (pretrain.snapshot_every,
listed in <pretrain_dir>/snapshots/index.json) scored on the same tasks, in this process.

    rows = score_snapshots(pretrain_dir, [(resolve_task_spec("lambada_openai"), 0)], data_dir,
                           seed=1234, max_examples=200, batch_size=16, max_length=None)
    rows[0]   # {"step": 500, "tokens": 2048000, "task": "lambada_openai", "metric": "acc",
              #  "value": 0.21, "ci95": [0.16, 0.27], "baseline": 0.0, "higher_is_better": True}

Each task is planned once (files read, subset and demonstrations drawn with `seed`), so
every snapshot answers exactly the same prompts; one scorer is loaded per snapshot and
dropped before the next.

The last snapshot is usually the final model itself (`snapshot_every` divides
`max_steps`): when a snapshot's weights file has the same sha256 as the model the stage
already scored (`scored_model`), that model's reports are its rows, instead of scoring
the same weights a second time (a third of the demo's evaluate stage).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from stages.evaluate.evaluate_task import TaskReport, plan_task, run_requests, score_task
from stages.evaluate.spec import TaskSpec
from storage.digest import sha256_file
from stages.snapshot_index import INDEX_NAME, SNAPSHOTS_DIR, read_snapshot_index

WEIGHTS_FILE = "model.safetensors"


def score_snapshots(pretrain_dir: str | Path, specs_and_shots: Sequence[tuple[TaskSpec, int]],
                    data_dir: str | Path, seed: int, max_examples: int | None, batch_size: int,
                    max_length: int | None, device: str = "cpu",
                    scored_model: tuple[Path, Sequence[TaskReport]] | None = None,
                    recorded_digests: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """One row per (snapshot, task, metric), snapshots in step order, tasks in the order
    given. A perplexity task is scored without demonstrations whatever its shots.
    `scored_model`: (model folder, its reports on these tasks, in this order, planned with
    the same seed and max_examples), reused for a snapshot holding the same weights.
    `recorded_digests`: sha256 by path under `pretrain_dir`, as the pretrain manifest lists
    them; a weights file not listed there is hashed."""
    from stages.evaluate.scorers import load_scorer

    pretrain_dir = Path(pretrain_dir)
    snapshots = read_snapshot_index(pretrain_dir)
    if not snapshots:
        raise FileNotFoundError(
            f"{pretrain_dir / SNAPSHOTS_DIR / INDEX_NAME} lists no snapshots: the pretrain stage writes "
            "them with pretrain.snapshot_every set (re-run pretrain with it to score across training)")
    for entry in snapshots:
        if not (pretrain_dir / entry["path"]).is_dir():
            raise FileNotFoundError(f"{pretrain_dir / SNAPSHOTS_DIR / INDEX_NAME} lists step {entry['step']} "
                                    f"at {pretrain_dir / entry['path']}, which does not exist; re-run the "
                                    "pretrain stage (`--force pretrain`) to rewrite its outputs")
    plans = [plan_task(spec, data_dir, shots=0 if spec.kind == "perplexity" else shots, seed=seed,
                       max_examples=max_examples)
             for spec, shots in specs_and_shots]
    recorded = recorded_digests or {}

    def weights_digest(model_dir: Path) -> str | None:
        path = Path(model_dir) / WEIGHTS_FILE
        try:
            known = recorded.get(path.relative_to(pretrain_dir).as_posix())
        except ValueError:  # not under the pretrain folder
            known = None
        return known or (sha256_file(path) if path.is_file() else None)

    scored_digest = weights_digest(scored_model[0]) if scored_model else None
    rows: list[dict[str, Any]] = []
    for entry in snapshots:
        if scored_digest is not None and weights_digest(pretrain_dir / entry["path"]) == scored_digest:
            reports = list(scored_model[1])
        else:
            scorer = load_scorer(pretrain_dir / entry["path"], batch_size=batch_size, device=device,
                                 max_length=max_length)
            reports = [score_task(plan, run_requests(scorer, plan.spec, plan.requests())) for plan in plans]
            del scorer  # one snapshot's weights in memory at a time
        for report in reports:
            for metric, score in report.scores.items():
                rows.append({"step": entry["step"], "tokens": entry["tokens"], "task": report.task,
                             "metric": metric, "value": score.value,
                             "ci95": list(score.ci95) if score.ci95 is not None else None,
                             "baseline": score.baseline, "higher_is_better": score.higher_is_better})
    return rows

