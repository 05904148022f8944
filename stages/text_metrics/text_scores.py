"""Every score a generation task asks for, from its outputs and references.

    score_texts(["bleu", "chrf"], hypotheses, references, seed=0,
                baseline=Baseline(sources, "copy the source"))     # {"bleu": TextScore, "chrf": ...}
    score_texts(["rouge"], summaries, references, seed=0)           # rouge1, rouge2, rougeL, rougeLsum

Texts are made one line each first (lines.one_line), exactly as write_texts writes them,
so the scores are the scores of the written files.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from stages.text_metrics.lines import one_line, reference_streams
from stages.text_metrics.rouge_scores import ROUGE_TYPES, MultiReference, rouge_scores
from stages.text_metrics.sacrebleu_scores import sacrebleu_score
from stages.text_metrics.score import TextScore

# A metric as a spec or config names it -> the scores it produces.
METRICS: dict[str, tuple[str, ...]] = {"bleu": ("bleu",), "chrf": ("chrf",), "rouge": ROUGE_TYPES}
SCORE_NAMES = tuple(name for names in METRICS.values() for name in names)


@dataclass(frozen=True)
class Baseline:
    """Outputs made without a model (one per example) and what they are, for people."""

    hypotheses: list[str]
    kind: str


def score_texts(metrics: Sequence[str], hypotheses: Sequence[str], references: Sequence[Sequence[str]], *,
                seed: int, baseline: Baseline | None = None,
                multi_reference: MultiReference = "mean") -> dict[str, TextScore]:
    unknown = [m for m in metrics if m not in METRICS]
    if unknown:
        raise ValueError(f"unknown text metric(s) {unknown}; known: {', '.join(METRICS)}")
    if not hypotheses:
        raise ValueError("no hypotheses to score")
    hyps = [one_line(text) for text in hypotheses]
    streams = reference_streams(references, len(hyps))
    per_example_refs = [list(refs) for refs in zip(*streams)]
    base, kind = None, "none"
    if baseline is not None:
        if len(baseline.hypotheses) != len(hyps):
            raise ValueError(f"{len(baseline.hypotheses)} baseline outputs for {len(hyps)} hypotheses")
        base, kind = [one_line(text) for text in baseline.hypotheses], baseline.kind
    scores: dict[str, TextScore] = {}
    for metric in metrics:
        if metric == "rouge":
            scores.update(rouge_scores(hyps, per_example_refs, seed=seed, baseline=base, baseline_kind=kind,
                                       multi_reference=multi_reference))
        else:
            scores[metric] = sacrebleu_score(metric, hyps, streams, seed=seed, baseline=base, baseline_kind=kind)
    return scores
