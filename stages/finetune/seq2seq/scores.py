"""Generated ids -> texts -> scores by the field's own libraries (`stages.text_metrics`:
sacreBLEU's BLEU and chrF, rouge-score's ROUGE), each with its baseline and 95% interval.

    texts = hypotheses(tokenizer_path, outputs)        # (N, width) ids, -1 after the end
    split_scores(spec, tokenizer_path, references, outputs)   # {"bleu": 31.2, ...}: what rank 0 logs per epoch
    scores = scored_split(spec, rows, texts, seed=0)    # {"bleu": TextScore, ...}
    write_split(directory, rows, texts, baseline)       # hyp.txt, ref.txt (ref0.txt ...), src.txt, baseline.txt

The baseline is output made without a model: the source copied (translation: names and
numbers survive), or the first turn of a dialogue (summarization). With several
references (DialogSum test), ROUGE is the mean over the references of each example
(text_metrics' "mean": each summary scored against each reference, averaged), and BLEU
and chrF take all references at once (sacreBLEU's multi-reference form).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from stages.finetune.seq2seq.reader import Seq2SeqRows
from stages.finetune.seq2seq.spec import Seq2SeqSpec
from stages.finetune.text_to_text.pairs import generated_texts


def hypotheses(tokenizer_path: str, outputs: np.ndarray) -> list[str]:
    """Generated ids -> texts, special tokens dropped, one line each."""
    return [" ".join(text.split()) for text in generated_texts(tokenizer_path, outputs)]


def baseline_of(spec: Seq2SeqSpec, rows: Seq2SeqRows):
    from stages.text_metrics import Baseline, copy_source, first_turn

    if spec.kind == "summarization":
        return Baseline([first_turn(source) for source in rows.sources], "the first turn (line) of the source")
    return Baseline(copy_source(rows.sources), "the source copied as the output")


def scored_split(spec: Seq2SeqSpec, rows: Seq2SeqRows, texts: list[str], *, seed: int,
                 with_baseline: bool = True) -> dict[str, Any]:
    """{score name: TextScore} for the spec's metrics, on `texts` against the rows' references."""
    from stages.text_metrics import score_texts

    scores = score_texts(spec.metric_groups, texts, rows.references, seed=seed,
                         baseline=baseline_of(spec, rows) if with_baseline else None)
    return {name: scores[name] for name in spec.metrics}


def split_scores(spec: Seq2SeqSpec, tokenizer_path: str, rows: Seq2SeqRows, outputs: np.ndarray) -> dict[str, float]:
    """Generated ids -> the spec's scores as plain numbers: what rank 0 logs after every epoch."""
    scores = scored_split(spec, rows, hypotheses(tokenizer_path, outputs), seed=0, with_baseline=False)
    return {name: score.value for name, score in scores.items()}


def write_split(directory: Path, rows: Seq2SeqRows, texts: list[str], baseline) -> dict[str, Path]:
    """One line per example, so that `sacrebleu ref.txt -i hyp.txt` on the files gives the
    number in metrics.json."""
    from stages.text_metrics import write_texts

    return write_texts(directory, texts, rows.references, sources=rows.sources, baseline=baseline.hypotheses)


def as_metrics(prefix: str, scores: dict[str, Any]) -> dict[str, Any]:
    """TextScores -> metrics.json entries, in the stage's flat form (`stages.finetune.
    score_context`): `<prefix><name>`, `..._baseline`, `..._ci95_low`, `..._ci95_high`, the
    library's signature as `..._signature`, and a note per score under `score_notes`."""
    from stages.finetune.score_context import BASELINE, CI_HIGH, CI_LOW, NOTES_KEY

    out: dict[str, Any] = {NOTES_KEY: {}}
    for name, score in scores.items():
        key = f"{prefix}{name}"
        out[key] = score.value
        if score.baseline is not None and score.ci95 is not None:
            out.update({key + BASELINE: score.baseline, key + CI_LOW: score.ci95[0], key + CI_HIGH: score.ci95[1]})
        out[f"{key}_signature"] = score.signature
        out[NOTES_KEY][key] = f"baseline: {score.baseline_kind}; 95% CI: seeded bootstrap over examples"
    return out
