"""GLUE as text to text (Raffel et al. 2020, sec. 2.4 and appendix D): a task prefix and
the named columns in, a label word (classification) or a score (STS-B) out.

    "sst2 sentence: a gripping , funny film"                      -> "positive"
    "rte sentence1: The cat sat. sentence2: A cat is sitting."    -> "entailment"
    "stsb sentence1: A man plays. sentence2: A man is playing."   -> "3.8"

Classification: the label words are T5's where the GLUE files use 0/1; word labels
(RTE, QNLI, MNLI) are their own words. A generation that is none of the task's words is
unreadable: class -1, scored as wrong (as in the T5 paper), written as `<unreadable>`
next to the raw generation in dev_predictions.tsv, and as the first label only in the
GLUE submission file (the GLUE server needs a label on every row; metrics.json counts
them, `test_unreadable_predictions`). With finetune.t5_scoring: rank, nothing is
generated: each label word is scored by its likelihood (`glue.rank`).

STS-B: the target is the gold score rounded to the nearest 0.2 and written with one
decimal ("3.8"), as T5 does (so the model picks one of 26 strings). The generation is
read as a float; one that is not a number is unreadable: NaN in the predictions,
`<unreadable>` in dev_predictions.tsv, scored as 0.0 (a correlation has no "wrong")
and written as 0.000 in the submission file. Both kinds of task report
`unreadable_predictions`, the number of dev generations that were neither.
"""

from __future__ import annotations

import math

import numpy as np
from tokenizers import Tokenizer

from stages.finetune.encode import EncodedSplit
from stages.finetune.text_to_text.pairs import encode_pairs, generated_texts

MAX_TARGET_LEN = 8  # tokens per label word or score, </s> included; longer ones are cut
INVALID_SCORE = 0.0  # STS-B: what a generation that is not a number counts as
# T5's label words for the GLUE tasks whose files hold 0/1 (class-id order).
LABEL_WORDS = {
    "cola": ("unacceptable", "acceptable"),
    "sst2": ("negative", "positive"),
    "mrpc": ("not_equivalent", "equivalent"),
    "qqp": ("not_duplicate", "duplicate"),
    "wnli": ("not_entailment", "entailment"),
}


def label_words(spec) -> tuple[str, ...]:
    """The words a classification task's generations must be (class-id order)."""
    if not hasattr(spec, "text_columns") or spec.is_regression:  # SQuAD, CoNLL; STS-B
        raise ValueError(f"task {spec.name}: only GLUE classification tasks have label words "
                         "(STS-B's targets are scores, SQuAD's answers, CoNLL-2003's entity lists)")
    return LABEL_WORDS.get(spec.name, spec.labels)


def source_texts(spec, texts: list[tuple[str, ...]]) -> list[str]:
    """T5's input format: "<task> <column>: <text> <column>: <text>"."""
    return [" ".join([spec.name, *(f"{column}: {text}" for column, text in zip(spec.text_columns, row))])
            for row in texts]


def score_text(score: float) -> str:
    """STS-B target: 3.77 -> "3.8" (nearest 0.2; halves to even, as T5's tf.round)."""
    return f"{np.round(float(score) * 5) / 5:.1f}"


def parse_score(text: str) -> float | None:
    """A generated STS-B score, or None when the text is not a finite number."""
    try:
        value = float(text.strip())
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def target_texts(spec, labels: np.ndarray) -> list[str]:
    if spec.is_regression:
        return [score_text(score) for score in labels]
    words = label_words(spec)
    return [words[int(label)] for label in labels]


def encode_text_to_text(tokenizer: Tokenizer, spec, texts: list[tuple[str, ...]],
                        labels: np.ndarray | None) -> EncodedSplit:
    """Sources with the task prefix; targets (with labels) the label word or score text."""
    targets = None if labels is None else target_texts(spec, labels)
    return encode_pairs(tokenizer, source_texts(spec, texts), targets, MAX_TARGET_LEN)


def class_ids(spec, tokenizer_path: str, outputs: np.ndarray) -> np.ndarray:
    """Generated ids (N, MAX_TARGET_LEN) -> class ids, -1 where the text is no label word."""
    words = {word: i for i, word in enumerate(label_words(spec))}
    return np.asarray([words.get(text, -1) for text in generated_texts(tokenizer_path, outputs)], dtype=np.int64)


def parsed_scores(tokenizer_path: str, outputs: np.ndarray) -> np.ndarray:
    """STS-B: generated scores (N,) float32, NaN where the text is not a number."""
    parsed = [parse_score(text) for text in generated_texts(tokenizer_path, outputs)]
    return np.asarray([np.nan if p is None else p for p in parsed], dtype=np.float32)


def file_predictions(spec, tokenizer_path: str, outputs: np.ndarray) -> np.ndarray:
    """What the generations say: class ids, -1 where no label word; or STS-B scores, NaN
    where not a number (`stages.finetune.glue.outputs` writes both as <unreadable>)."""
    if spec.is_regression:
        return parsed_scores(tokenizer_path, outputs)
    return class_ids(spec, tokenizer_path, outputs)


def scored_predictions(spec, tokenizer_path: str, outputs: np.ndarray) -> np.ndarray:
    """What the metrics are computed on: class ids with -1 (never a gold label, so wrong),
    or scores with INVALID_SCORE where unreadable."""
    predicted = file_predictions(spec, tokenizer_path, outputs)
    return np.nan_to_num(predicted, nan=INVALID_SCORE) if spec.is_regression else predicted


def text_to_text_scores(spec, tokenizer_path: str, labels: np.ndarray, outputs: np.ndarray) -> dict[str, float]:
    """The task's GLUE metrics on the generations, and `unreadable_predictions`."""
    from stages.finetune.glue.metrics import compute_metrics
    from stages.finetune.glue.outputs import unreadable_rows

    predicted = file_predictions(spec, tokenizer_path, outputs)
    unreadable = int(unreadable_rows(predicted).sum())
    if spec.is_regression:
        predicted = np.nan_to_num(predicted, nan=INVALID_SCORE)
    return {**compute_metrics(spec.metrics, predicted, labels), "unreadable_predictions": unreadable}


def unreadable_facts(spec, cfg, dev_predictions: np.ndarray, test_predictions: np.ndarray) -> dict:
    """A generating T5: the share of dev generations that are no label word (no number),
    the unreadable test rows, and a warning past finetune.max_unreadable_fraction."""
    from stages.finetune.glue.outputs import DEV_PREDICTIONS_NAME, UNREADABLE, unreadable_rows

    count = int(unreadable_rows(dev_predictions).sum())
    fraction = count / max(1, len(dev_predictions))
    facts: dict = {"unreadable_fraction": fraction,
                   "test_unreadable_predictions": int(unreadable_rows(test_predictions).sum())}
    if fraction > cfg.max_unreadable_fraction:
        if spec.is_regression:
            expected, scored, advice = "a number", "scored as 0.0", "train longer or on more examples"
        else:
            expected = "a label word (" + ", ".join(label_words(spec)) + ")"
            scored, advice = "scored as wrong", "train longer or on more examples, or set finetune.t5_scoring: rank"
        facts["warnings"] = [
            f"{count} of {len(dev_predictions)} dev generations ({fraction:.0%}) are not {expected}: they are "
            f"{scored} and written as {UNREADABLE} in {DEV_PREDICTIONS_NAME}, so the dev scores mostly measure "
            f"whether the model has learnt the output format, not the task: {advice} "
            f"(finetune.max_unreadable_fraction={cfg.max_unreadable_fraction} sets this warning's threshold)"]
    return facts
