"""Scores of generated text by the field's own libraries: sacreBLEU (BLEU, chrF) and
rouge-score (ROUGE-1/2/L/Lsum), each with a baseline and a seeded 95% interval.

    scores = score_texts(["bleu", "chrf"], hypotheses, references, seed=0,
                         baseline=Baseline(copy_source(sources), "copy the source"))
    scores["bleu"].value, scores["bleu"].ci95, scores["bleu"].baseline, scores["bleu"].signature
    write_texts(out_dir, hypotheses, references, sources=sources)   # hyp.txt, ref.txt (or ref0.txt, ...)

`references` holds one list per example (one reference each for Multi30k and WMT, three
for DialogSum test). The texts are scored exactly as they are written, one per line, so
`sacrebleu ref.txt -i hyp.txt` on the written files prints the same BLEU.

Used by the fine-tuning stage (sequence-to-sequence tasks) and the evaluate stage
(translation and summarization by prompt); imports neither, so both can import it.
"""

from stages.text_metrics.baselines import copy_source, first_turn, lead_sentences
from stages.text_metrics.lines import TextFileError, one_line, read_lines, read_references, write_texts
from stages.text_metrics.score import TextScore
from stages.text_metrics.text_scores import METRICS, SCORE_NAMES, Baseline, score_texts

__all__ = ["METRICS", "SCORE_NAMES", "Baseline", "TextFileError", "TextScore", "copy_source", "first_turn",
           "lead_sentences", "one_line", "read_lines", "read_references", "score_texts", "write_texts"]
