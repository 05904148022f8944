"""`pretrain status RUN_DIR`: the run's state (pipeline.run_state), then one line per
stage: its state, fingerprint, time and two or three headline metrics with their
verdicts, cut to the terminal's width. `wide=True` shows every key metric instead, uncut;
`status_json` is the same for programs. A folder of runs (a sweep's root, runs/) gives
one line per run (`render_runs`).
"""

from __future__ import annotations

import re
from pathlib import Path

from pipeline.graph import BY_NAME, STAGE_NAMES
from pipeline.run_state import (DONE, FAILED, INTERRUPTED, NEVER_RUN, RUNNING, RunState, classify_stage,
                                combine, selected_stages)
from pipeline.runner import load_run_index, run_store
from stages.report.numbers import format_duration
from storage.local_store import RUN_INDEX, describe_damage, read_json_object
from storage.urls import is_url
from storage.writer_lock import describe_holder

SCORE = re.compile(r"/(accuracy|f1|matthews(_corrcoef)?|pearson|spearman|exact_match|em)$")
HEADLINE_METRICS = 3  # per stage, in the narrow table
# What a glance wants of each stage, first things first (else its summary_metrics).
HEADLINES = {"ingest": ("documents_out", "bytes_out", "dropped_duplicate"),
             "dataset": ("train_tokens", "validation_tokens"),
             "pretrain": ("val_loss", "final_loss", "steps")}
ELLIPSIS = "…"


def read_status(run_dir: Path | str) -> tuple[RunState, list[dict]]:
    """(the run's state, [{stage, state, fingerprint, seconds, metrics (the key metrics),
    headline [text], all_metrics, error}]) for the run's latest fingerprints."""
    index = load_run_index(run_dir)
    store = run_store(run_dir, index)
    selected = selected_stages(index)
    states, rows = [], []
    for name in STAGE_NAMES:
        fp = index.get("stages", {}).get(name, "")
        manifest = store.manifest(name, fp) if fp else None
        failure = store.failure(name, fp) if fp and manifest is None else None
        stage = classify_stage(name, fp, finished=manifest is not None,
                               holder=lambda n=name, f=fp: store.lock_holder(n, f), failed=failure is not None,
                               started=bool(fp) and manifest is None and store.started(name, fp),
                               selected=name in selected, seconds=(manifest or {}).get("wall_seconds"))
        states.append(stage)
        metrics = (manifest or {}).get("metrics", {})
        row = {"stage": name, "state": stage.state, "fingerprint": fp, "seconds": stage.seconds,
               "metrics": key_metrics(name, metrics) if manifest else {}, "all_metrics": metrics,
               "error": failure.get("error") if failure else None, "headline": []}
        if manifest:
            # Sizes only (a stat per file): `pretrain verify` compares the bytes.
            damage = store.damaged(name, fp, manifest=manifest)
            if damage:
                row["state"], row["headline"] = "damaged", [describe_damage(damage)]
            else:
                row["headline"] = headline(name, metrics)
        elif stage.state == FAILED:
            row["metrics"] = {"error": (row["error"] or "")[:80]}
            row["headline"] = [(row["error"] or "failed").splitlines()[0]]
        elif stage.state == RUNNING:
            row["headline"] = [f"being written by {describe_holder(stage.holder)}"]
        elif stage.state == INTERRUPTED:
            row["headline"] = ["stopped before finishing; the next run "
                               + ("resumes it" if BY_NAME[name].resumes else "starts it over")]
        rows.append(row)
    return combine(states, selected, started=index.get("updated")), rows


def stage_rows(run_dir: Path | str) -> list[dict]:
    """[{stage, state, fingerprint, seconds, metrics, ...}], one per stage."""
    return read_status(run_dir)[1]


def key_metrics(stage: str, metrics: dict) -> dict:
    """Every metric worth a look (`status --wide`): the stage's summary metrics, scores
    with their intervals, baselines and verdicts."""
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


def headline(stage: str, metrics: dict) -> list[str]:
    """Two or three short "key=value" texts, a score with its verdict."""
    wanted = HEADLINES.get(stage) or BY_NAME[stage].summary_metrics
    if wanted:
        return [f"{k}={_number(metrics[k])}" for k in wanted if k in metrics][:HEADLINE_METRICS]
    if stage == "evaluate":
        return _evaluate_headline(metrics)
    if stage == "finetune":
        return _finetune_headline(metrics)
    return []


def _finetune_headline(metrics: dict) -> list[str]:
    """Each task's first score (accuracy, F1, ...) and its verdict, three tasks at most."""
    from stages.finetune.score_context import VERDICTS, read_contexts, verdict

    contexts = read_contexts(metrics)
    shown, tasks = [], []
    for key, value in metrics.items():
        task = key.split("/", 1)[0]
        if not SCORE.search(key) or task in tasks or not isinstance(value, (int, float)):
            continue
        tasks.append(task)
        context = contexts.get(key)
        judged = f" {VERDICTS[verdict(context['baseline'], context['ci95'])]}" if context else ""
        shown.append(f"{key}={_number(value)}{judged}")
    return shown[:HEADLINE_METRICS] + ([f"+{len(shown) - HEADLINE_METRICS} tasks"]
                                       if len(shown) > HEADLINE_METRICS else [])


def _evaluate_headline(metrics: dict) -> list[str]:
    """How the key scores stand against their baselines (the report's verdicts; a task
    with most prompts cut is counted apart, as the report marks it unreliable), then the
    score that clears its baseline most clearly (the report header's best)."""
    from stages.report.evaluation import KEY_METRICS, scores_from_metrics
    from stages.report.summary import best_scores

    evaluation = scores_from_metrics(metrics)
    judged = [score["verdict"] for entry in evaluation.values() if not entry.get("unreliable")
              for metric, score in entry["scores"].items() if metric in KEY_METRICS and score["verdict"]]
    out = []
    if judged:
        out.append(f"{judged.count('above')} above, {judged.count('chance')} ≈ chance, "
                   f"{judged.count('below')} below baseline")
    unreliable = sum(1 for entry in evaluation.values() if entry.get("unreliable"))
    if unreliable:
        out.append(f"{unreliable} unreliable (prompts cut)")
    for name, _ in best_scores(evaluation, None)[:1]:
        task, metric = name.split(" ", 1)
        score = evaluation[task]["scores"][metric]
        out.append(f"best {task}/{metric}={_number(score['value'])} (baseline {_number(score['baseline'])})")
    return out


def _number(value) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    return f"{value:,.0f}" if abs(value) >= 1e4 else f"{value:.4g}"


def format_metrics(metrics: dict) -> str:
    return "  ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in metrics.items())


def format_table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(str(x)) for x in column) for column in zip(headers, *rows)]
    line = lambda cells: "  ".join(str(c).ljust(w) for c, w in zip(cells, widths)).rstrip()
    return "\n".join([line(headers), line(["-" * w for w in widths])] + [line(r) for r in rows])


def fit_table(headers: list[str], rows: list[list[str]], width: int) -> str:
    """format_table with its last column cut so that no line is longer than `width` (a
    table that wraps in the terminal is unreadable); every other column keeps its width."""
    fixed = [max(len(str(x)) for x in column) for column in zip(*([h for h in headers[:-1]],
                                                                   *[r[:-1] for r in rows]))]
    room = max(0, width - sum(fixed) - 2 * len(fixed))
    last = [cut(str(r[-1]), room) for r in rows]
    table = format_table(headers, [r[:-1] + [c] for r, c in zip(rows, last)])
    return "\n".join(cut(line, width) for line in table.splitlines())


def cut(text: str, width: int) -> str:
    return text if len(text) <= width else (text[:max(0, width - 1)] + ELLIPSIS if width > 0 else "")


def render(run_dir: Path | str, *, width: int | None = None, wide: bool = False) -> str:
    """The run's state line and its stage table (a folder, or an object-store URL); for a
    folder of runs, one line per run. `width`: cut every line to it (None: no limit)."""
    from pipeline.run_discovery import is_runs_root

    if not is_url(run_dir) and is_runs_root([run_dir]):
        return render_runs(Path(run_dir), width=width, wide=wide)
    state, rows = read_status(run_dir)
    first = cut(f"{_name(run_dir)}: {state.describe()}, {format_duration(state.wall_seconds())}", width or 10**9)
    if wide or width is None:
        table = format_table(
            ["stage", "state", "fingerprint", "seconds", "key metrics"],
            [[r["stage"], r["state"], r["fingerprint"], _seconds(r["seconds"]),
              format_metrics(r["metrics"]) if r["state"] != "damaged" else r["headline"][0]] for r in rows])
        return first + "\n" + table
    table = fit_table(["stage", "state", "fp", "time", "headline"],
                      [[r["stage"], r["state"], r["fingerprint"][:8], format_duration(r["seconds"]),
                        "  ".join(r["headline"])] for r in rows], width)
    return first + "\n" + table


def status_json(run_dir: Path | str) -> dict:
    """Everything `render` shows, and every metric of every stage."""
    from pipeline.run_discovery import is_runs_root

    if not is_url(run_dir) and is_runs_root([run_dir]):
        return {"root": str(run_dir), "runs": [_run_json(path, state) for path, state in runs_under(Path(run_dir))]}
    state, rows = read_status(run_dir)
    return {"run_dir": str(run_dir), **state.as_json(), "describe": state.describe(),
            "stages": [{"stage": r["stage"], "state": r["state"], "fingerprint": r["fingerprint"],
                        "seconds": r["seconds"], "headline": r["headline"], "error": r["error"],
                        "metrics": r["all_metrics"]} for r in rows]}


def runs_under(root: Path) -> list[tuple[Path, RunState]]:
    """Every run under `root` with its state; a sweep's points that have not started
    (named in sweep.json, no pipeline.json yet) as never run."""
    from pipeline.config import ConfigError
    from pipeline.run_discovery import SWEEP_INDEX, find_run_dirs
    from pipeline.run_state import read_run_state

    try:
        found = find_run_dirs(root)
    except ConfigError:
        if not (root / SWEEP_INDEX).is_file():
            raise
        found = []  # a sweep none of whose points has started yet
    paths = {p.resolve(): p for p in found}
    for sweep_root in dict.fromkeys([root, *(p.parent for p in found)]):
        for point in _sweep_points(sweep_root):
            paths.setdefault((sweep_root / point).resolve(), sweep_root / point)
    return [(path, read_run_state(path) if (path / RUN_INDEX).is_file() else RunState(NEVER_RUN))
            for _, path in sorted(paths.items())]


def render_runs(root: Path, *, width: int | None = None, wide: bool = False) -> str:
    """One line per run under `root`: its state, stages done of those selected, wall
    time and pretraining loss (a sweep's root: its name and shared store first)."""
    runs = runs_under(root)
    rows = []
    for path, state in runs:
        done = sum(s.state == DONE for s in state.stages if s.stage in state.selected)
        loss = _pretrain_loss(path, state)
        rows.append([_relative(path, root), state.describe() if wide else state.state,
                     f"{done}/{len(state.selected)}" if state.selected else "-",
                     format_duration(state.wall_seconds()), loss])
    counts: dict[str, int] = {}
    for _, state in runs:
        counts[state.state] = counts.get(state.state, 0) + 1
    summary = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
    sweep = read_json_object(root / "sweep.json")
    first = (f"sweep {sweep.get('name')}: {len(runs)} points ({summary}), stage outputs in "
             f"{(root / sweep.get('store', 'store')).resolve()}" if sweep
             else f"{len(runs)} runs ({summary}) under {root}")
    headers = ["run", "state", "stages done", "time", "pretrain"]
    if wide or width is None:
        return first + "\n" + format_table(headers, rows)
    return cut(first, width) + "\n" + fit_table(headers, rows, width)


def _run_json(path: Path, state: RunState) -> dict:
    return {"run_dir": str(path), **state.as_json(), "describe": state.describe(),
            "stages": {s.stage: s.state for s in state.stages}}


def _pretrain_loss(path: Path, state: RunState) -> str:
    stage = state.stage("pretrain")
    if stage is None or stage.state != DONE:
        return ""
    try:
        index = load_run_index(path)
        metrics = (run_store(path, index).manifest("pretrain", stage.fingerprint) or {}).get("metrics", {})
    except (OSError, ValueError):
        return ""
    return "  ".join(f"{k}={_number(metrics[k])}" for k in ("final_loss", "val_loss") if k in metrics)


def _sweep_points(root: Path) -> list[str]:
    index = read_json_object(root / "sweep.json")
    return [str(p.get("workdir") or p.get("name")) for p in index.get("points", [])
            if isinstance(p, dict) and (p.get("workdir") or p.get("name"))]


def _relative(path: Path, root: Path) -> str:
    try:
        return str(path.resolve().relative_to(root.resolve()))
    except ValueError:
        return str(path)


def _name(run_dir: Path | str) -> str:
    return str(run_dir).rstrip("/")


def _seconds(seconds: float | None) -> str:
    return f"{seconds:.1f}" if seconds is not None else "-"


