"""Several runs side by side: config differences, curves overlaid, scores with deltas
(pretraining summary, fine-tuning scores, the GLUE average, zero/few-shot scores).

The first run is the baseline; every delta is `run - baseline`. Whether a delta is
better depends on the metric: losses go down, scores go up. A delta is coloured only
where the two numbers measure the same thing: not across different shots or example
counts, and a loss per token not across different tokenizers (compare their bits per
byte instead): `caveats` says why not. Where both scores have a 95% interval, the delta
is `significant` only when the intervals do not overlap (a conservative test: two
intervals that overlap a little can still differ at 95%).
"""

from __future__ import annotations

import time
from typing import Any

from stages.report import RunSource, Series, build_report, finetune_series, panels, pretrain_series
from stages.section import flatten

# Keys that always differ between runs and say nothing about the experiment.
IGNORED_CONFIG_KEYS = ("name", "workdir", "store")
PRETRAIN_SUMMARY = ("steps", "final_loss", "val_loss", "val_perplexity", "tokens_per_second")
# Per token: a run with another vocabulary predicts other units, so these do not compare.
TOKEN_LEVEL = {("pretrain", "final_loss"), ("pretrain", "val_loss"), ("pretrain", "val_perplexity"),
               ("evaluate", "token_perplexity"), ("evaluate", "perplexity")}


def run_labels(sources: list[RunSource]) -> list[str]:
    """A unique, short label per run: its experiment name, else its directory name."""
    labels: list[str] = []
    for i, source in enumerate(sources):
        label = source.name
        if label in labels and source.run_dir is not None:
            label = source.run_dir.name
        if label in labels:
            label = f"{label}#{i + 1}"
        labels.append(label)
    return labels


def build_comparison(sources: list[RunSource]) -> dict[str, Any]:
    labels = run_labels(sources)
    reports = [build_report(s) for s in sources]
    return {
        "runs": [{"label": label, "experiment": s.name, "run_dir": str(s.run_dir or ""),
                  "stages": {row["stage"]: row["state"] for row in r["stages"]}}
                 for label, s, r in zip(labels, sources, reports)],
        "generated": time.time(),
        "config_differences": config_differences([s.config for s in sources]),
        "metrics": metric_rows(labels, sources, reports),
    }



def config_differences(configs: list[dict]) -> list[dict[str, Any]]:
    """[{key, values: [per run]}] for every key whose value is not the same in all runs
    (a key missing from a run shows as None)."""
    flats = [flatten(c) for c in configs]
    keys = sorted(set().union(*flats)) if flats else []
    rows = []
    for key in keys:
        if key in IGNORED_CONFIG_KEYS:
            continue
        values = [flat.get(key) for flat in flats]
        if any(v != values[0] for v in values[1:]):
            rows.append({"key": key, "values": values})
    return rows


def metric_rows(labels: list[str], sources: list[RunSource], reports: list[dict]) -> list[dict]:
    """[{group, metric, values, deltas, lower_is_better, contexts, caveats, significant}]:
    pretraining summary, every fine-tuning and zero/few-shot score any run has, with deltas
    against the first run; contexts: per run, the score's {"baseline", "ci95", "verdict"}
    or None (`stages.report.scores`, `stages.report.evaluation`); caveats: per run, why its
    delta does not compare (None where it does); significant: per run, True or False
    where both runs have an interval, else None."""
    rows = []
    tokenizers = tokenizer_caveats(sources)
    for metric in PRETRAIN_SUMMARY:
        values = [_pretrain_metric(s, metric) for s in sources]
        if any(v is not None for v in values):
            caveats = tokenizers if ("pretrain", metric) in TOKEN_LEVEL else None
            rows.append(_row("pretrain", metric, values, lower_is_better=metric != "tokens_per_second"
                             and metric != "steps", caveats=caveats))
        if metric == "val_loss":  # the same loss per byte of text: compares across tokenizers
            bits = [r.get("summary", {}).get("val_bits_per_byte") for r in reports]
            if any(b is not None for b in bits):
                rows.append(_row("pretrain", "val_bits_per_byte (≈)", bits, lower_is_better=True))
    score_keys: list[str] = []
    for report in reports:
        score_keys += [k for k in report["finetune"] if k not in score_keys]
    for key in score_keys:
        task, metric = key.split("/", 1)
        contexts = [r.get("finetune_context", {}).get(task, {}).get(metric) for r in reports]
        rows.append(_row(task, metric, [r["finetune"].get(key) for r in reports], lower_is_better=False,
                         contexts=contexts, intervals=[c.get("ci95") if c else None for c in contexts]))
    glue = [r["glue_average"] if r.get("glue_average") else None for r in reports]
    if any(g is not None for g in glue):
        rows.append(_row("GLUE", "average", [g["score"] if g else None for g in glue], lower_is_better=False,
                         contexts=[g if g and g.get("verdict") else None for g in glue],
                         intervals=[g.get("ci95") if g else None for g in glue]))
    return rows + evaluation_rows(reports, tokenizers)


def tokenizer_caveats(sources: list[RunSource]) -> list[str | None]:
    """Per run: why its per-token losses do not compare with the first run's (another
    tokenizer: its vocabulary size where known), else None."""
    def identity(source: RunSource) -> tuple[str | None, object]:
        # tokenizer.json's checksum: two runs that trained the same tokenizer under other
        # fingerprints (another workdir, a pretrain-only change upstream) still compare
        record = source.stage("tokenizer")
        if record is None or not record.manifest:
            return None, None
        files = {f.get("path"): f.get("sha256") for f in record.manifest.get("files") or [] if isinstance(f, dict)}
        return files.get("tokenizer.json") or record.fingerprint, record.metrics.get("vocab_size")

    first_fp, first_vocab = identity(sources[0])
    caveats: list[str | None] = [None]
    for source in sources[1:]:
        fingerprint, vocab = identity(source)
        if first_fp is None or fingerprint is None or fingerprint == first_fp:
            caveats.append(None)
            continue
        sizes = (f" (vocabularies of {first_vocab:,} and {vocab:,} tokens)"
                 if isinstance(first_vocab, int) and isinstance(vocab, int) else "")
        caveats.append(f"other tokenizer{sizes}: a loss per token does not compare; compare bits per byte")
    return caveats


def evaluation_rows(reports: list[dict], tokenizers: list[str | None] | None = None) -> list[dict]:
    """Every zero/few-shot score any run has (group "evaluate: task"), with deltas; which
    way is better comes from the score (perplexity and bits per byte: lower). A delta does
    not compare across shots or example counts, nor, per token, across tokenizers."""
    keys: list[tuple[str, str]] = []
    for report in reports:
        keys += [(task, metric) for task, entry in report.get("evaluation", {}).items()
                 for metric in entry["scores"] if (task, metric) not in keys]
    rows = []
    for task, metric in keys:
        entries = [r.get("evaluation", {}).get(task) for r in reports]
        scores = [(e or {}).get("scores", {}).get(metric) for e in entries]
        higher = next(s["higher_is_better"] for s in scores if s is not None)
        caveats = [_setting_caveat(entries[0], entry) for entry in entries]
        if ("evaluate", metric) in TOKEN_LEVEL and tokenizers:
            caveats = [c or t for c, t in zip(caveats, tokenizers)]
        rows.append(_row(f"evaluate: {task}", metric, [s["value"] if s else None for s in scores],
                         lower_is_better=not higher,
                         contexts=[s if s and s.get("verdict") else None for s in scores],
                         intervals=[s.get("ci95") if s else None for s in scores], caveats=caveats))
    return rows


def _setting_caveat(base: dict | None, entry: dict | None) -> str | None:
    """Why a task's scores in two runs measure different things: other shots, another
    number of examples, or one of them unreliable (truncated prompts); None if they match."""
    if not base or not entry or base is entry:
        return None
    reasons = [f"{name} differ ({base.get(key)} vs {entry.get(key)})"
               for key, name in (("shots", "shots"), ("num_examples", "example counts"))
               if base.get(key) is not None and entry.get(key) is not None and base.get(key) != entry.get(key)]
    reasons += [f"unreliable: {e['unreliable']}" for e in (base, entry) if e.get("unreliable")]
    return "; ".join(reasons) or None


def _row(group: str, metric: str, values: list, *, lower_is_better: bool, contexts: list | None = None,
         intervals: list | None = None, caveats: list | None = None) -> dict[str, Any]:
    base = values[0]
    deltas = [None if (v is None or base is None) else v - base for v in values]
    intervals = intervals or [None] * len(values)
    return {"group": group, "metric": metric, "values": values, "deltas": deltas,
            "lower_is_better": lower_is_better, "contexts": contexts or [None] * len(values),
            "caveats": caveats or [None] * len(values),
            "significant": [None] + [intervals_differ(intervals[0], other) for other in intervals[1:]]}


def intervals_differ(first, second) -> bool | None:
    """True when two 95% intervals do not overlap, False when they do, None without both."""
    if not first or not second:
        return None
    return first[1] < second[0] or second[1] < first[0]


def _pretrain_metric(source: RunSource, metric: str) -> float | None:
    record = source.stage("pretrain")
    value = record.metrics.get(metric) if record else None
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def overlaid_panels(sources: list[RunSource]) -> dict[str, Series]:
    """Panel title -> {line label: points}: the same panels as a single report, with
    one line per run (and per metric, where a panel holds several)."""
    labels = run_labels(sources)
    overlaid: dict[str, Series] = {}
    for label, source in zip(labels, sources):
        pretrain = source.stage("pretrain")
        for title, lines in panels(pretrain_series(pretrain.directory if pretrain else None)).items():
            for key, points in lines.items():
                line = label if len(lines) == 1 else f"{label}: {key}"
                overlaid.setdefault(f"Pretraining: {title.lower()}", {})[line] = points
        finetune = source.stage("finetune")
        for task, series in finetune_series(finetune.directory if finetune else None).items():
            if "loss" in series:
                overlaid.setdefault(f"Fine-tuning loss: {task}", {})[label] = series["loss"]
    return overlaid
