"""`pretrain status RUN_DIR`: one row per stage from the manifests on disk."""

from __future__ import annotations

import json
import re
from pathlib import Path

from pipeline.graph import BY_NAME, STAGE_NAMES
from pipeline.runner import load_run_index, run_store
from pipeline.store import RUN_INDEX
from pipeline.sweep import SWEEP_INDEX

SCORE = re.compile(r"/(accuracy|f1|matthews(_corrcoef)?|pearson|spearman|exact_match|em)$")


def stage_rows(run_dir: Path) -> list[dict]:
    """[{stage, state, fingerprint, seconds, metrics}] for the run's latest fingerprints."""
    index = load_run_index(run_dir)
    store = run_store(run_dir, index)
    rows = []
    for name in STAGE_NAMES:
        fp = index["stages"].get(name, "")
        manifest = store.manifest(name, fp) if fp else None
        if manifest:
            # Sizes only (a stat per file): `pretrain verify` compares the bytes.
            damaged = store.damaged(name, fp, manifest=manifest)
            state, seconds = ("damaged" if damaged else "done"), manifest.get("wall_seconds")
            metrics = key_metrics(name, manifest.get("metrics", {}))
        elif fp and store.failure(name, fp):
            state, seconds, metrics = "failed", None, {"error": store.failure(name, fp)["error"][:80]}
        elif fp and store.started(name, fp):
            state, seconds, metrics = "incomplete", None, {}
        else:
            state, seconds, metrics = "not run", None, {}
        rows.append({"stage": name, "state": state, "fingerprint": fp,
                     "seconds": seconds, "metrics": metrics})
    return rows


def key_metrics(stage: str, metrics: dict) -> dict:
    wanted = BY_NAME[stage].summary_metrics
    if wanted:
        return {k: metrics[k] for k in wanted if k in metrics}
    if stage == "evaluate":  # acc, perplexity, ... per task, judged the right way round
        from stages.report.evaluation import key_scores

        return key_scores(metrics)
    # A score with its 95% interval and baseline (finetune), so "at chance" shows here too.
    from stages.finetune.score_context import describe, read_contexts

    contexts = read_contexts(metrics)
    return {k: describe(v, contexts[k]) if k in contexts else v for k, v in metrics.items() if SCORE.search(k)}


def format_metrics(metrics: dict) -> str:
    return "  ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in metrics.items())


def format_table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(str(x)) for x in column) for column in zip(headers, *rows)]
    line = lambda cells: "  ".join(str(c).ljust(w) for c, w in zip(cells, widths)).rstrip()
    return "\n".join([line(headers), line(["-" * w for w in widths])] + [line(r) for r in rows])


def render(run_dir: Path | str) -> str:
    """The stage table of a run (a folder, or an object-store URL); for a sweep root, one
    row per point."""
    if "://" not in str(run_dir) and not (Path(run_dir) / RUN_INDEX).is_file() and (Path(run_dir) / SWEEP_INDEX).is_file():
        return render_sweep(Path(run_dir))
    rows = stage_rows(run_dir)
    return format_table(
        ["stage", "state", "fingerprint", "seconds", "key metrics"],
        [[r["stage"], r["state"], r["fingerprint"],
          f"{r['seconds']:.1f}" if r["seconds"] is not None else "-", format_metrics(r["metrics"])]
         for r in rows])


def render_sweep(root: Path) -> str:
    """One row per point of `<root>/sweep.json`: its state from the manifests (a killed
    sweep leaves "running" in sweep.json), stage counts, wall time and pretraining loss."""
    index = json.loads((root / SWEEP_INDEX).read_text(encoding="utf-8"))
    rows = []
    for point in index.get("points", []):
        run_dir = root / point.get("workdir", point["name"])
        if not (run_dir / RUN_INDEX).is_file():
            rows.append([point["name"], "not started", "-", "-", "-"])
            continue
        stages = stage_rows(run_dir)
        states = [r["state"] for r in stages]
        state = ("done" if all(s == "done" for s in states) else "failed" if "failed" in states
                 else point.get("state", "incomplete") if point.get("state") == "running" else "incomplete")
        done = sum(s == "done" for s in states)
        seconds = sum(r["seconds"] or 0 for r in stages)
        pretrain = next(r for r in stages if r["stage"] == "pretrain")["metrics"]
        rows.append([point["name"], state, f"{done}/{len(stages)}", f"{seconds:.0f}",
                     format_metrics({k: pretrain[k] for k in ("final_loss", "val_loss") if k in pretrain})])
    return (f"sweep {index.get('name')}: {len(rows)} points, stage outputs in "
            f"{(root / index.get('store', 'store')).resolve()}\n"
            + format_table(["point", "state", "stages done", "seconds", "pretrain"], rows))
