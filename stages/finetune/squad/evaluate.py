"""EM and F1 exactly as the official SQuAD evaluation scripts (evaluate-v2.0.py, which
equals evaluate-v1.1.py on questions that have answers), and v2.0's best-threshold search.

Scores here are fractions in [0, 1]; the official scripts print them x100.
"""

from __future__ import annotations

import collections
import re
import string

_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)
_PUNCTUATION = set(string.punctuation)


def normalize_answer(text: str) -> str:
    """Lower case, drop punctuation, then the articles a/an/the, then collapse whitespace."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def exact_match(prediction: str, gold: str) -> int:
    return int(normalize_answer(prediction) == normalize_answer(gold))


def f1(prediction: str, gold: str) -> float:
    pred_tokens, gold_tokens = normalize_answer(prediction).split(), normalize_answer(gold).split()
    if not pred_tokens or not gold_tokens:  # v2.0: a no-answer matches only no-answer
        return float(pred_tokens == gold_tokens)
    same = sum((collections.Counter(pred_tokens) & collections.Counter(gold_tokens)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred_tokens), same / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def gold_texts(answers: list[str]) -> list[str]:
    """The official v2.0 rule: answers that normalize to nothing are dropped; a question
    left without any is scored against the empty answer."""
    return [a for a in answers if normalize_answer(a)] or [""]


def score_question(prediction: str, answers: list[str]) -> tuple[int, float]:
    """(EM, F1) of one prediction: the max over the gold answers."""
    golds = gold_texts(answers)
    return max(exact_match(prediction, g) for g in golds), max(f1(prediction, g) for g in golds)


def squad_scores(predictions: dict[str, str], gold: dict[str, list[str]]) -> dict[str, float]:
    """{"exact_match", "f1"} over every gold question (a missing prediction scores 0)."""
    per_question = [score_question(predictions[qid], answers) if qid in predictions else (0, 0.0)
                    for qid, answers in gold.items()]
    total = max(1, len(per_question))
    return {"exact_match": sum(e for e, _ in per_question) / total,
            "f1": sum(f for _, f in per_question) / total}


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
