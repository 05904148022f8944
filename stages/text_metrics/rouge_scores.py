"""ROUGE-1, ROUGE-2, ROUGE-L and ROUGE-Lsum F-measures by Google's rouge-score, with
Porter stemming, averaged over examples (rouge-score's own aggregation is the mean of
per-example scores, as here).

ROUGE-Lsum scores the union of sentence-level LCS, so it needs each text's sentences on
their own lines: every hypothesis and reference is split with NLTK's Punkt (default
parameters; see baselines.split_sentences) and rejoined with newlines. ROUGE-1/2/L
tokenize newlines as spaces, so the split changes only ROUGE-Lsum.

Several references per example (DialogSum test has three): each example's score is the
MEAN of its scores against each reference (`multi_reference="mean"`). That is our reading
of how the DialogSum paper (Chen et al., Findings of ACL 2021) reports test ROUGE: the
output against each annotator's summary, averaged; the authors' repository only shows a
baseline scored against summary1, and the paper's exact wording could not be checked from
here. The mean keeps every annotator's view, where rouge-score's `score_multi` (the max
over references, `multi_reference="max"` here) rewards resembling whichever annotator is
closest and rises with the number of references.
"""

from __future__ import annotations

from importlib.metadata import version
from typing import Literal, Sequence

import numpy as np

from stages.text_metrics.baselines import split_sentences
from stages.text_metrics.resampling import bootstrap_ci95, mean_of
from stages.text_metrics.score import TextScore

ROUGE_TYPES = ("rouge1", "rouge2", "rougeL", "rougeLsum")
MultiReference = Literal["mean", "max"]


def build_scorer():
    from rouge_score import rouge_scorer

    return rouge_scorer.RougeScorer(list(ROUGE_TYPES), use_stemmer=True)


def sentences_on_lines(text: str) -> str:
    return "\n".join(split_sentences(text))


def example_rouge(hypotheses: Sequence[str], references: Sequence[Sequence[str]],
                  multi_reference: MultiReference = "mean") -> dict[str, np.ndarray]:
    """Per-example F-measure of each ROUGE type: {"rouge1": array(num_examples), ...}."""
    scorer = build_scorer()
    values = {name: np.zeros(len(hypotheses)) for name in ROUGE_TYPES}
    for i, (hypothesis, refs) in enumerate(zip(hypotheses, references, strict=True)):
        prediction, targets = sentences_on_lines(hypothesis), [sentences_on_lines(r) for r in refs]
        if multi_reference == "max":
            best = scorer.score_multi(targets, prediction)
            for name in ROUGE_TYPES:
                values[name][i] = best[name].fmeasure
            continue
        per_reference = [scorer.score(target, prediction) for target in targets]
        for name in ROUGE_TYPES:
            values[name][i] = np.mean([scores[name].fmeasure for scores in per_reference])
    return values


def signature(multi_reference: MultiReference) -> str:
    return (f"rouge-score:{version('rouge-score')}|stemmer:porter|fmeasure|"
            f"sentences:nltk-punkt-default|nrefs-combined:{multi_reference}|examples:mean")


def rouge_scores(hypotheses: Sequence[str], references: Sequence[Sequence[str]], *, seed: int,
                 baseline: Sequence[str] | None = None, baseline_kind: str = "none",
                 multi_reference: MultiReference = "mean") -> dict[str, TextScore]:
    values = example_rouge(hypotheses, references, multi_reference)
    base = example_rouge(baseline, references, multi_reference) if baseline is not None else None
    return {name: TextScore(value=float(np.mean(values[name])),
                            ci95=bootstrap_ci95(mean_of(values[name]), len(hypotheses), seed=seed),
                            baseline=None if base is None else float(np.mean(base[name])),
                            baseline_kind=baseline_kind, higher_is_better=True,
                            signature=signature(multi_reference))
            for name in ROUGE_TYPES}
