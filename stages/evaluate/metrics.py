"""Scores of one task from its per-example results, each with a baseline and a 95% interval.

What is computed is lm-eval 0.4.13's `process_results` + aggregation for the same kind:

    perplexity       token_perplexity = exp(-sum ll / sum tokens)     (tokens as the scorer counts them)
                     word_perplexity  = exp(-sum ll / sum words)      (words = len(re.split(r"\\s+", text)))
                     byte_perplexity  = exp(-sum ll / sum bytes)      (UTF-8 bytes)
                     bits_per_byte    = -sum ll / sum bytes / ln 2
    cloze            acc = share of targets whose every token is the greedy argmax
                     perplexity = exp(-mean over examples of the target's log-probability)
    multiple_choice  acc = argmax of the choices' log-probabilities is the gold
                     acc_norm  = argmax of logprob / len(choice) in CHARACTERS (lm-eval's acc_norm)
                     acc_bytes = argmax of logprob / len(choice) in UTF-8 bytes (lm-eval's acc_bytes;
                                 equal to acc_norm on ASCII choices)
                     f1 (class 1), mcc: of the argmax predictions (scikit-learn's formulas)
    generation       exact_match, f1: SQuAD's official scoring, max over the gold answers

Baselines (`stages.finetune.baselines`): accuracy-like scores of a task whose choices are
fixed class labels (GLUE, BoolQ) get the majority class of the scored rows; other multiple
choice tasks get chance, the mean of 1/n over examples; F1 of class 1 gets the F1 of always
predicting class 1 (the best constant prediction); MCC, EM/F1 of generation and cloze
accuracy get 0; bits per byte gets 8 and byte perplexity 256 (a uniform model over byte
values); token and word perplexity get none (they depend on the vocabulary). Intervals
(`stages.finetune.intervals`): Wilson for shares of 0/1 outcomes, else a seeded
percentile bootstrap over examples (documents for perplexity; none for a single one).
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from stages.finetune import baselines, intervals

LN2 = math.log(2)


@dataclass(frozen=True)
class Score:
    value: float
    ci95: tuple[float, float] | None   # None where it cannot be estimated (one document)
    baseline: float | None
    baseline_kind: str                 # how the baseline was found, for people
    higher_is_better: bool

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def count_words(text: str, rule: str = "lm_eval") -> int:
    """lm_eval: `len(re.split(r"\\s+", text))` (lm-eval's count, which counts an empty
    piece at a leading or trailing whitespace); words_plus_lines: whitespace-separated
    words plus one per line (the PTB convention of one <eos> per sentence)."""
    if rule == "words_plus_lines":
        return len(text.split()) + text.count("\n")
    return len(re.split(r"\s+", text))


def perplexity_scores(logprobs: list[float], num_tokens: list[int], num_words: list[int],
                      num_bytes: list[int], wanted: list[str], seed: int) -> dict[str, Score]:
    ll = np.asarray(logprobs, dtype=np.float64)
    denominators = {"token_perplexity": num_tokens, "word_perplexity": num_words,
                    "byte_perplexity": num_bytes, "bits_per_byte": num_bytes}
    baseline = {"byte_perplexity": (256.0, "256: a uniform model over byte values"),
                "bits_per_byte": (8.0, "8: a uniform model over byte values")}
    scores = {}
    for name in wanted:
        counts = np.asarray(denominators[name], dtype=np.float64)
        statistic = _bits_per_unit if name == "bits_per_byte" else _perplexity_per_unit
        value = float(statistic(ll, counts))
        ci = intervals.bootstrap_ci95(statistic, ll, counts, seed=seed) if len(ll) >= 2 else None
        base, kind = baseline.get(name, (None, "none: depends on the model's vocabulary"))
        scores[name] = Score(value, ci, base, kind, higher_is_better=False)
    return scores


def _perplexity_per_unit(ll: np.ndarray, counts: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.exp(-np.sum(ll, axis=axis) / np.sum(counts, axis=axis))


def _bits_per_unit(ll: np.ndarray, counts: np.ndarray, axis: int = -1) -> np.ndarray:
    return -np.sum(ll, axis=axis) / np.sum(counts, axis=axis) / LN2


def cloze_scores(logprobs: list[float], is_greedy: list[bool], wanted: list[str], seed: int) -> dict[str, Score]:
    scores = {}
    if "acc" in wanted:
        scores["acc"] = _proportion([int(g) for g in is_greedy],
                                    0.0, "0: no chance level over an open vocabulary")
    if "perplexity" in wanted:
        ll = np.asarray(logprobs, dtype=np.float64)
        statistic = _mean_perplexity
        ci = intervals.bootstrap_ci95(statistic, ll, seed=seed) if len(ll) >= 2 else None
        scores["perplexity"] = Score(float(statistic(ll)), ci, None,
                                     "none: depends on the model's vocabulary", higher_is_better=False)
    return scores


def _mean_perplexity(ll: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.exp(-np.mean(ll, axis=axis))


def choice_predictions(logprobs: list[float], choices: list[str]) -> dict[str, int]:
    """lm-eval's three argmaxes (first index on ties, as np.argmax)."""
    ll = np.asarray(logprobs, dtype=np.float64)
    chars = np.asarray([float(len(c)) for c in choices])
    num_bytes = np.asarray([float(len(c.encode("utf-8"))) for c in choices])
    return {"pred": int(np.argmax(ll)), "pred_norm": int(np.argmax(ll / chars)),
            "pred_bytes": int(np.argmax(ll / num_bytes))}


def multiple_choice_scores(predictions: list[dict[str, int]], golds: list[int], num_choices: list[int],
                           has_classes: bool, wanted: list[str], seed: int) -> dict[str, Score]:
    golds_array = np.asarray(golds)
    if has_classes:
        label = baselines.majority_class(golds_array)
        acc_base = (baselines.majority_class_accuracy(golds_array), f"majority class (always choice {label})")
    else:
        acc_base = (baselines.chance_baseline_choices(num_choices), "chance: mean of 1/n choices")
    pred = np.asarray([p["pred"] for p in predictions])
    scores = {}
    for name, key in (("acc", "pred"), ("acc_norm", "pred_norm"), ("acc_bytes", "pred_bytes")):
        if name in wanted:
            correct = [int(p[key] == g) for p, g in zip(predictions, golds)]
            scores[name] = _proportion(correct, *acc_base)
    if "f1" in wanted:
        scores["f1"] = _bootstrapped(intervals.binary_f1, (pred, golds_array), seed,
                                     baselines.best_constant_f1(golds_array),
                                     "F1 of always predicting class 1 (the best constant prediction)")
    if "mcc" in wanted:
        scores["mcc"] = _bootstrapped(intervals.matthews, (pred, golds_array), seed,
                                      0.0, "0: what a constant prediction scores")
    return scores


def squad_example_scores(prediction: str, answers: list[str]) -> tuple[int, float]:
    """(EM, F1) of one generated answer by evaluate-v1.1.py's rules: SQuAD's
    normalisation, the max over every gold answer."""
    from stages.finetune.squad.evaluate import score_question

    exact, f1 = score_question(prediction, answers, version="1.1")
    return int(exact), float(f1)


def generation_scores(exact: list[int], f1: list[float], wanted: list[str], seed: int) -> dict[str, Score]:
    scores = {}
    if "exact_match" in wanted:
        scores["exact_match"] = _proportion(exact, 0.0, "0: no constant answer is right")
    if "f1" in wanted:
        scores["f1"] = _bootstrapped(intervals.mean, (np.asarray(f1, dtype=np.float64),), seed,
                                     0.0, "0: no constant answer is right")
    return scores


def _proportion(outcomes: list[int], baseline: float, kind: str) -> Score:
    n, successes = len(outcomes), int(sum(outcomes))
    return Score(successes / n, intervals.proportion_ci95(successes, n), baseline, kind, higher_is_better=True)


def _bootstrapped(statistic, arrays: tuple[np.ndarray, ...], seed: int, baseline: float, kind: str) -> Score:
    value = float(statistic(*arrays))
    ci = intervals.bootstrap_ci95(statistic, *arrays, seed=seed) if len(arrays[0]) >= 2 else None
    return Score(value, ci, baseline, kind, higher_is_better=True)
