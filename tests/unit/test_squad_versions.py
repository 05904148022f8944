"""SQuAD v1.1 is scored by evaluate-v1.1.py's rules and v2.0 by evaluate-v2.0.py's, on the
real dev-v1.1.json: every gold answer counts in v1.1 (3 questions have a gold answer "."
that v2.0's rule would drop), and an empty F1 is 0 there."""

from __future__ import annotations

import re
import string
from collections import Counter

import pytest

from stages.finetune.squad.evaluate import f1_v1, f1_v2, per_question_scores, score_question, squad_scores
from stages.finetune.squad.reader import read_squad

QUESTION = "57340d124776f419006617bf"  # gold answers include "."
DOT_ANSWER_QUESTIONS = {"5725bad5271a42140099d0c1", "5730b7ce069b5314008322c4", QUESTION}


# The reference: evaluate-v1.1.py's scoring functions, as the official script writes them.
def _official_normalize(s):
    def remove_articles(text):
        return re.sub(r"\b(a|an|the)\b", " ", text)

    def white_space_fix(text):
        return " ".join(text.split())

    def remove_punc(text):
        exclude = set(string.punctuation)
        return "".join(ch for ch in text if ch not in exclude)

    return white_space_fix(remove_articles(remove_punc(s.lower())))


def _official_f1(prediction, ground_truth):
    prediction_tokens = _official_normalize(prediction).split()
    ground_truth_tokens = _official_normalize(ground_truth).split()
    common = Counter(prediction_tokens) & Counter(ground_truth_tokens)
    num_same = sum(common.values())
    if num_same == 0:
        return 0
    precision = 1.0 * num_same / len(prediction_tokens)
    recall = 1.0 * num_same / len(ground_truth_tokens)
    return (2 * precision * recall) / (precision + recall)


def _official_em(prediction, ground_truth):
    return _official_normalize(prediction) == _official_normalize(ground_truth)


def _official_max(metric_fn, prediction, ground_truths):
    return max(metric_fn(prediction, ground_truth) for ground_truth in ground_truths)


def _official_evaluate(gold: dict[str, list[str]], predictions: dict[str, str]) -> dict[str, float]:
    exact_match = f1 = total = 0
    for qid, ground_truths in gold.items():
        total += 1
        if qid not in predictions:
            continue
        exact_match += _official_max(_official_em, predictions[qid], ground_truths)
        f1 += _official_max(_official_f1, predictions[qid], ground_truths)
    return {"exact_match": 100.0 * exact_match / total, "f1": 100.0 * f1 / total}


@pytest.fixture(scope="module")
def gold(data_dir) -> dict[str, list[str]]:
    return {e.id: [a.text for a in e.answers] for e in read_squad(data_dir / "squad" / "dev-v1.1.json")}


def test_a_dot_prediction_matches_a_dot_answer_under_v1_1_only(gold):
    assert "." in gold[QUESTION]
    assert score_question(".", gold[QUESTION], version="1.1") == (1, 0.0)  # EM 1; F1 0: no common token
    assert score_question(".", gold[QUESTION], version="2.0") == (0, 0.0)  # v2.0 drops the "." answer
    assert _official_max(_official_em, ".", gold[QUESTION]) is True


def test_first_gold_answers_score_100_under_v1_1(gold):
    first = {qid: answers[0] for qid, answers in gold.items()}
    scores = squad_scores(first, gold, version="1.1")
    assert len(gold) == 10570 and scores["exact_match"] == 1.0 and scores["f1"] == 1.0


@pytest.mark.parametrize("kind", ["partial", "dot", "one_word"])
def test_v1_1_equals_the_official_script_on_every_question(gold, kind):
    predictions = {
        "partial": lambda answers: answers[-1] + " of",  # partial F1 against some gold answers
        "dot": lambda answers: ".", "one_word": lambda answers: (answers[0].split() or ["x"])[0],
    }[kind]
    predicted = {qid: predictions(answers) for i, (qid, answers) in enumerate(gold.items())
                 if kind != "partial" or i % 3}  # unanswered questions score 0 in both
    em, f1 = per_question_scores(predicted, gold, version="1.1")
    for i, (qid, answers) in enumerate(gold.items()):
        if qid in predicted:
            assert em[i] == _official_max(_official_em, predicted[qid], answers), qid
            assert f1[i] == pytest.approx(_official_max(_official_f1, predicted[qid], answers)), qid
        else:
            assert em[i] == 0 and f1[i] == 0
    official = _official_evaluate(gold, predicted)
    ours = squad_scores(predicted, gold, version="1.1")
    assert 100 * ours["exact_match"] == pytest.approx(official["exact_match"], abs=1e-9)
    assert 100 * ours["f1"] == pytest.approx(official["f1"], abs=1e-9)


def test_the_versions_differ_exactly_on_the_dot_answers(gold):
    dots = {qid: "." for qid in gold}
    em_v1, _ = per_question_scores(dots, gold, version="1.1")
    em_v2, _ = per_question_scores(dots, gold, version="2.0")
    differing = {qid for qid, a, b in zip(gold, em_v1, em_v2) if a != b}
    assert differing == DOT_ANSWER_QUESTIONS


def test_f1_of_empty_texts_follows_each_script():
    assert f1_v1("", "") == 0.0 and f1_v2("", "") == 1.0
    assert f1_v1("the", "a") == 0.0 and f1_v2("the", "a") == 1.0  # both normalize to ""
    with pytest.raises(ValueError, match="v1.1 question without gold answers"):
        score_question("x", [], version="1.1")
    with pytest.raises(ValueError, match="unknown SQuAD version"):
        score_question("x", ["x"], version="3")
