"""Corpus BLEU and chrF by sacreBLEU, with the signature that says how they were computed.

    bleu_score(hypotheses, reference_streams, seed=0)   # TextScore(value=27.3, signature="nrefs:1|case:mixed|...")

`reference_streams` is sacreBLEU's form: one list per reference position, each as long as
the hypotheses. The metric objects are sacreBLEU's defaults (BLEU: 13a tokenization,
exponential smoothing; chrF: character 6-grams, beta 2), the defaults of its command
line, so `sacrebleu ref.txt -i hyp.txt` (and `-m chrf`) on the written files agree.
"""

from __future__ import annotations

from typing import Sequence

from stages.text_metrics.resampling import bootstrap_ci95, corpus_score_of
from stages.text_metrics.score import TextScore


def build_metric(name: str):
    from sacrebleu.metrics import BLEU, CHRF

    if name == "bleu":
        return BLEU()
    if name == "chrf":
        return CHRF()
    raise ValueError(f"no sacreBLEU metric {name!r}; known: bleu, chrf")


def corpus_score(name: str, hypotheses: Sequence[str], reference_streams: Sequence[Sequence[str]]
                 ) -> tuple[float, str]:
    """(score, signature) of one system output."""
    metric = build_metric(name)
    score = metric.corpus_score(list(hypotheses), [list(stream) for stream in reference_streams])
    return float(score.score), str(metric.get_signature())


def sacrebleu_score(name: str, hypotheses: Sequence[str], reference_streams: Sequence[Sequence[str]], *,
                    seed: int, baseline: Sequence[str] | None = None, baseline_kind: str = "none") -> TextScore:
    value, signature = corpus_score(name, hypotheses, reference_streams)
    metric = build_metric(name)
    # Per-sentence statistics, the same sacreBLEU sums for the corpus score.
    stats = metric._extract_corpus_statistics(list(hypotheses), [list(s) for s in reference_streams])
    statistic = corpus_score_of(stats, lambda totals: metric._compute_score_from_stats(totals).score)
    ci = bootstrap_ci95(statistic, len(hypotheses), seed=seed)
    base = corpus_score(name, baseline, reference_streams)[0] if baseline is not None else None
    return TextScore(value=value, ci95=ci, baseline=base, baseline_kind=baseline_kind,
                     higher_is_better=True, signature=signature)
