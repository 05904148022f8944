"""EM and F1 exactly as the official SQuAD evaluation scripts, each version by its own
rules, and v2.0's best-threshold search.

    evaluate-v1.1.py   every gold answer counts, the max over all of them; F1 is 0 when
                       prediction and gold share no token (so "" vs "" has F1 0, and a
                       gold answer "." is matched exactly by a prediction that normalizes
                       to "", EM 1: 3 questions of dev-v1.1.json have such an answer)
    evaluate-v2.0.py   gold answers that normalize to "" are dropped (a question left
                       without any is scored against ""), and an empty prediction or
                       gold has F1 1 when both are empty, else 0

The two agree except on gold answers that normalize to nothing. Scores here are
fractions in [0, 1]; the official scripts print them x100.
"""

from __future__ import annotations

import collections
import re
import string

import numpy as np

VERSIONS = ("1.1", "2.0")
_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)
_PUNCTUATION = set(string.punctuation)


def normalize_answer(text: str) -> str:
    """Lower case, drop punctuation, then the articles a/an/the, then collapse whitespace."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def exact_match(prediction: str, gold: str) -> int:
    return int(normalize_answer(prediction) == normalize_answer(gold))


def f1_v1(prediction: str, gold: str) -> float:
    """evaluate-v1.1.py's f1_score: 0 without a common token (empty texts included)."""
    pred_tokens, gold_tokens = normalize_answer(prediction).split(), normalize_answer(gold).split()
    return _overlap_f1(pred_tokens, gold_tokens)


def f1_v2(prediction: str, gold: str) -> float:
    """evaluate-v2.0.py's compute_f1: a no-answer matches only a no-answer."""
    pred_tokens, gold_tokens = normalize_answer(prediction).split(), normalize_answer(gold).split()
    if not pred_tokens or not gold_tokens:
        return float(pred_tokens == gold_tokens)
    return _overlap_f1(pred_tokens, gold_tokens)


def _overlap_f1(pred_tokens: list[str], gold_tokens: list[str]) -> float:
    same = sum((collections.Counter(pred_tokens) & collections.Counter(gold_tokens)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred_tokens), same / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def gold_texts_v2(answers: list[str]) -> list[str]:
    """The official v2.0 rule: answers that normalize to nothing are dropped; a question
    left without any is scored against the empty answer."""
    return [a for a in answers if normalize_answer(a)] or [""]


def score_question(prediction: str, answers: list[str], *, version: str) -> tuple[int, float]:
    """(EM, F1) of one prediction: the max over the gold answers, by `version`'s rules."""
    if version == "1.1":
        if not answers:
            raise ValueError("a SQuAD v1.1 question without gold answers cannot be scored "
                             "(evaluate-v1.1.py takes the max over them); is this a v2.0 file?")
        return max(exact_match(prediction, g) for g in answers), max(f1_v1(prediction, g) for g in answers)
    if version == "2.0":
        golds = gold_texts_v2(answers)
        return max(exact_match(prediction, g) for g in golds), max(f1_v2(prediction, g) for g in golds)
    raise ValueError(f"unknown SQuAD version {version!r}; known: {', '.join(VERSIONS)}")


def per_question_scores(predictions: dict[str, str], gold: dict[str, list[str]], *,
                        version: str) -> tuple[np.ndarray, np.ndarray]:
    """(EM (N,) of 0/1, F1 (N,)) for every gold question in order; a question without a
    prediction scores 0 (as the official scripts do)."""
    em, f1 = np.zeros(len(gold), dtype=np.int64), np.zeros(len(gold), dtype=np.float64)
    for i, (qid, answers) in enumerate(gold.items()):
        if qid in predictions:
            em[i], f1[i] = score_question(predictions[qid], answers, version=version)
    return em, f1


def squad_scores(predictions: dict[str, str], gold: dict[str, list[str]], *, version: str) -> dict[str, float]:
    """{"exact_match", "f1"} over every gold question (a missing prediction scores 0)."""
    em, f1 = per_question_scores(predictions, gold, version=version)
    total = max(1, len(em))
    return {"exact_match": float(em.sum()) / total, "f1": float(f1.sum()) / total}


def best_threshold(predictions: dict[str, str], scores: dict[str, float], null_odds: dict[str, float],
                   has_answer: dict[str, bool]) -> tuple[float, float]:
    """evaluate-v2.0.py's find_best_thresh: predict no-answer where null_odds > threshold.
    `predictions` and `scores` are those of the best non-null answers. Returns
    (best score as a fraction, threshold)."""
    current = best = sum(1 for qid in has_answer if not has_answer[qid])
    threshold = 0.0
    for qid in sorted(null_odds, key=lambda k: null_odds[k]):
        if qid not in scores:
            continue
        if has_answer[qid]:
            current += scores[qid]
        else:
            current += -1 if predictions[qid] else 0
        if current > best:
            best, threshold = current, null_odds[qid]
    return best / max(1, len(scores)), threshold
