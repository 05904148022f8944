"""Generation tasks scored on whole outputs: BLEU and chrF (sacreBLEU) for translation
by prompt, ROUGE (rouge-score) for TL;DR: summarization, each with the spec's baseline
and a seeded 95% interval (stages.text_metrics).

    scores, records = score_text_generation(spec, rows, selection, pairs, seed)
    write_generation_texts(output_dir, report)   # texts/<task>/hyp.txt ref.txt (ref0.txt ...) baseline.txt

The written files are exactly what was scored, one output per line, so
`sacrebleu texts/<task>/ref.txt -i texts/<task>/hyp.txt` reproduces the stage's BLEU.
"""

from __future__ import annotations

from pathlib import Path

from stages.evaluate.prompts import doc_target
from stages.evaluate.templates import TemplateRowError, render_in_row
from stages.evaluate.text_generation_spec import uses_text_metrics
from stages.text_metrics import Baseline, score_texts, write_texts

TEXTS_DIR = "texts"

__all__ = ["TEXTS_DIR", "score_text_generation", "uses_text_metrics", "write_generation_texts"]


def score_text_generation(spec, rows, selection, pairs, seed):
    """(scores, per-example records) of a generation task whose metrics are bleu/chrf/rouge."""
    records, hypotheses, references, baseline = [], [], [], []
    for i, pair in zip(selection, pairs):
        (_, result), = pair
        row, where = rows.rows[i], rows.where[i]
        target = doc_target(spec, row, where)
        refs = target if isinstance(target, list) else [target]
        base = render_in_row(spec.baseline.output, row, key="baseline.output", where=where, spec_file=spec.file)
        if not isinstance(base, str):
            raise TemplateRowError(f"{where}: 'baseline.output' gave {base!r}; it must render text")
        if references and len(refs) != len(references[0]):
            raise TemplateRowError(f"{where}: 'doc_to_target' gave {len(refs)} references, the first scored row "
                                   f"{len(references[0])}; every row needs the same number")
        hypotheses.append(result.text); references.append(refs); baseline.append(base)
        records.append({"example": i, "prediction": result.text, "references": refs, "baseline": base,
                        "truncated": result.truncated})
    scores = score_texts(spec.metrics, hypotheses, references, seed=seed,
                         baseline=Baseline(baseline, spec.baseline.name))
    return scores, records


def write_generation_texts(output_dir: str | Path, report) -> Path | None:
    """The outputs, references and baseline outputs of a scored task, one per line."""
    if not report.examples or "references" not in report.examples[0]:
        return None
    directory = Path(output_dir) / TEXTS_DIR / report.task
    write_texts(directory, [r["prediction"] for r in report.examples], [r["references"] for r in report.examples],
                baseline=[r["baseline"] for r in report.examples])
    return directory
