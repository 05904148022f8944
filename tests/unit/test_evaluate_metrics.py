"""Scores from a fake scorer whose log-probabilities are known: acc, acc_norm (characters),
acc_bytes, perplexities, bits per byte, cloze and generation scores, baselines, intervals,
truncation counts, and merging workers' answers."""

from __future__ import annotations

import json
import math
import textwrap

import pytest
from scipy.stats import binomtest

from stages.evaluate.evaluate_task import evaluate_task, merge_answered, plan_task, run_requests, score_task
from stages.evaluate.requests import GenerationResult, LoglikelihoodResult, RollingResult
from stages.evaluate.spec import load_task_spec


class FakeScorer:
    """Answers from tables: log-probability per continuation (or per rolling text)."""

    family, max_length = "gpt", 64

    def __init__(self, logprobs=None, greedy=(), truncated=(), texts=None, tokens=None):
        self.logprobs, self.greedy, self.truncated = logprobs or {}, set(greedy), set(truncated)
        self.texts, self.tokens = texts or {}, tokens or {}

    def loglikelihood(self, requests):
        return [LoglikelihoodResult(self.logprobs[(r.example, r.continuation)], r.example in self.greedy,
                                    num_tokens=1, truncated=r.example in self.truncated) for r in requests]

    def loglikelihood_rolling(self, requests, stride=None):
        return [RollingResult(self.logprobs[r.example], self.tokens[r.example]) for r in requests]

    def generate(self, requests):
        return [GenerationResult(self.texts[r.example], truncated=r.example in self.truncated) for r in requests]


def write(tmp_path, spec: str, rows: list[dict]) -> object:
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    (tmp_path / "task.yaml").write_text(textwrap.dedent(spec), encoding="utf-8")
    return load_task_spec(tmp_path / "task.yaml")


MULTIPLE_CHOICE = """\
name: mc
kind: multiple_choice
splits: {test: {path: rows.jsonl, format: jsonl}}
eval_split: test
doc_to_text: "{{q}}"
doc_to_target: label
doc_to_choice: choices
metrics: [acc, acc_norm, acc_bytes]
"""


def test_acc_acc_norm_and_acc_bytes(tmp_path):
    rows = [
        # acc picks "x" (-1.5 > -4); acc_norm divides by the CHOICE's characters, not the
        # continuation's: -1.5/1 < -4/3, so it picks "yyy" (with the space: -0.75 > -1).
        {"q": "a", "choices": ["x", "yyy"], "label": 1},
        # "é" is 1 character but 2 bytes: acc_norm -1.2/1 < -2/2 picks "ab"; acc_bytes -0.6 > -1 picks "é".
        {"q": "b", "choices": ["é", "ab"], "label": 0},
        # Three choices, a tie: the first wins (np.argmax).
        {"q": "c", "choices": ["p", "q", "r"], "label": 0},
    ]
    logprobs = {(0, " x"): -1.5, (0, " yyy"): -4.0, (1, " é"): -1.2, (1, " ab"): -2.0,
                (2, " p"): -1.0, (2, " q"): -1.0, (2, " r"): -3.0}
    report = evaluate_task(write(tmp_path, MULTIPLE_CHOICE, rows), tmp_path,
                           FakeScorer(logprobs, truncated=[2]))
    assert [e["pred"] for e in report.examples] == [0, 0, 0]
    assert [e["pred_norm"] for e in report.examples] == [1, 1, 0]
    assert [e["pred_bytes"] for e in report.examples] == [1, 0, 0]
    assert report.scores["acc"].value == pytest.approx(2 / 3)
    assert report.scores["acc_norm"].value == pytest.approx(2 / 3)
    assert report.scores["acc_bytes"].value == pytest.approx(1.0)
    # Per-example choices differ: the baseline is chance, mean of 1/n.
    assert report.scores["acc"].baseline == pytest.approx((1 / 2 + 1 / 2 + 1 / 3) / 3)
    wilson = binomtest(2, 3).proportion_ci(method="wilson")
    assert report.scores["acc"].ci95 == pytest.approx((wilson.low, wilson.high))
    assert report.num_truncated == 1 and report.num_examples == 3
    assert report.metrics()["acc_ci95_low"] == pytest.approx(wilson.low)


def test_fixed_classes_get_the_majority_baseline_f1_and_mcc(tmp_path):
    spec_text = (MULTIPLE_CHOICE.replace("doc_to_choice: choices", 'doc_to_choice: ["no", "yes"]')
                 .replace("[acc, acc_norm, acc_bytes]", "[acc, f1, mcc]"))
    labels = [1, 1, 1, 0, 0]
    predictions = [1, 1, 0, 0, 1]
    # Questions that are not bare numbers: a prompt that renders only digits is lm-eval's
    # multiple-input form (the index of the gold context), not a question.
    rows = [{"q": f"question {i}", "label": label} for i, label in enumerate(labels)]
    logprobs = {}
    for i, pred in enumerate(predictions):
        logprobs[(i, " no")], logprobs[(i, " yes")] = (-2.0, -1.0) if pred == 1 else (-1.0, -2.0)
    report = evaluate_task(write(tmp_path, spec_text, rows), tmp_path, FakeScorer(logprobs))
    assert report.scores["acc"].value == pytest.approx(0.6)
    assert report.scores["acc"].baseline == pytest.approx(0.6)          # always "yes"
    assert report.scores["f1"].value == pytest.approx(2 / 3)             # tp 2, fp 1, fn 1
    assert report.scores["f1"].baseline == pytest.approx(2 * 0.6 / 1.6)  # F1 of always "yes"
    assert report.scores["mcc"].value == pytest.approx(1 / 6)
    assert report.scores["mcc"].baseline == 0.0
    low, high = report.scores["f1"].ci95
    assert 0.0 <= low <= report.scores["f1"].value <= high <= 1.0


PERPLEXITY = """\
name: ppl
kind: perplexity
splits: {test: {path: rows.jsonl, format: jsonl}}
eval_split: test
doc_to_target: text
metrics: [token_perplexity, word_perplexity, byte_perplexity, bits_per_byte]
"""


def test_perplexities_and_bits_per_byte(tmp_path):
    texts = ["one two three", "four  five\nsix seven"]   # 13 and 20 bytes; lm-eval's words: 3 and 4
    rows = [{"text": t} for t in texts]
    # 2 bits per byte exactly: log P = -2 ln 2 per byte.
    logprobs = {i: -2 * math.log(2) * len(t.encode()) for i, t in enumerate(texts)}
    tokens = {0: 3, 1: 5}
    report = evaluate_task(write(tmp_path, PERPLEXITY, rows), tmp_path, FakeScorer(logprobs, tokens=tokens))
    total = -sum(logprobs.values())
    assert report.scores["bits_per_byte"].value == pytest.approx(2.0)
    assert report.scores["byte_perplexity"].value == pytest.approx(4.0)
    assert report.scores["word_perplexity"].value == pytest.approx(math.exp(total / 7))
    assert report.scores["token_perplexity"].value == pytest.approx(math.exp(total / 8))
    assert report.scores["bits_per_byte"].baseline == 8.0
    assert report.scores["token_perplexity"].baseline is None
    assert not report.scores["bits_per_byte"].higher_is_better
    assert [e["num_words"] for e in report.examples] == [3, 4]


def test_word_counts_on_another_text_and_ptbs_rule(tmp_path):
    spec_text = PERPLEXITY.replace("doc_to_target: text", 'doc_to_target: "{{text|upper}}"') + (
        'count_text: "{{raw}}"\nword_count: words_plus_lines\n')
    rows = [{"text": "a b", "raw": " w1 w2 \n w3 \n"}]
    report = evaluate_task(write(tmp_path, spec_text, rows), tmp_path,
                           FakeScorer({0: -10.0}, tokens={0: 2}))
    assert report.examples[0]["num_words"] == 3 + 2   # words + one per line
    assert report.examples[0]["num_bytes"] == len(" w1 w2 \n w3 \n")
    assert report.scores["word_perplexity"].value == pytest.approx(math.exp(10 / 5))
    assert report.scores["word_perplexity"].ci95 is None   # one document: no interval


CLOZE = """\
name: cloze
kind: cloze
splits: {test: {path: rows.jsonl, format: jsonl}}
eval_split: test
doc_to_text: "{{text.split(' ')[:-1]|join(' ')}}"
doc_to_target: "{{' '+text.split(' ')[-1]}}"
metrics: [perplexity, acc]
"""


def test_cloze_accuracy_and_target_perplexity(tmp_path):
    rows = [{"text": "the cat sat"}, {"text": "a dog ran"}, {"text": "birds fly"}, {"text": "fish swim"}]
    logprobs = {(0, " sat"): -0.5, (1, " ran"): -2.0, (2, " fly"): -1.0, (3, " swim"): -4.5}
    report = evaluate_task(write(tmp_path, CLOZE, rows), tmp_path, FakeScorer(logprobs, greedy=[0, 2]))
    assert report.scores["acc"].value == 0.5
    assert report.scores["acc"].baseline == 0.0
    assert report.scores["perplexity"].value == pytest.approx(math.exp(8.0 / 4))
    assert report.scores["perplexity"].ci95[0] <= report.scores["perplexity"].value


GENERATION = """\
name: qa
kind: generation
splits: {test: {path: rows.jsonl, format: jsonl}}
eval_split: test
doc_to_text: "Q: {{q}}\\nA:"
doc_to_target: "{{answers}}"
until: ["\\n", "Q:"]
max_new_tokens: 8
metrics: [exact_match, f1]
"""


def test_generation_exact_match_and_f1(tmp_path):
    rows = [{"q": "who?", "answers": ["Denver Broncos", "the Broncos"]},
            {"q": "when?", "answers": ["February 7, 2016"]}]
    texts = {0: " The Broncos.", 1: " 7 February"}
    spec = write(tmp_path, GENERATION, rows)
    report = evaluate_task(spec, tmp_path, FakeScorer(texts=texts, truncated=[1]), shots=1, seed=0)
    assert [e["exact_match"] for e in report.examples] == [1, 0]
    assert report.examples[1]["f1"] == pytest.approx(2 * (2 / 2) * (2 / 3) / (1 + 2 / 3))
    assert report.scores["exact_match"].value == 0.5 and report.scores["exact_match"].baseline == 0.0
    assert report.num_truncated == 1
    requests = plan_task(spec, tmp_path, shots=1, seed=0).requests()
    # The one other row is the demonstration, showing its first gold answer.
    assert requests[0].context == "Q: when?\nA: February 7, 2016\n\nQ: who?\nA:"
    assert requests[0].until == ("\n", "Q:") and requests[0].max_new_tokens == 8


def test_answers_merged_from_workers_score_as_one_process(tmp_path):
    rows = [{"q": f"question {i}", "choices": ["x", "yy"], "label": i % 2} for i in range(9)]
    logprobs = {(i, c): -float((i * 7 + len(c)) % 5) for i in range(9) for c in (" x", " yy")}
    spec = write(tmp_path, MULTIPLE_CHOICE, rows)
    scorer = FakeScorer(logprobs)
    whole = evaluate_task(spec, tmp_path, scorer, shots=2, seed=3)
    plan = plan_task(spec, tmp_path, shots=2, seed=3)
    parts = [run_requests(scorer, spec, plan.requests(plan.shard(i, 3))) for i in (2, 0, 1)]
    merged = score_task(plan, merge_answered(parts))
    assert merged.to_dict() == whole.to_dict() and merged.examples == whole.examples
    with pytest.raises(ValueError, match="no answers for 3 evaluated examples"):
        score_task(plan, merge_answered(parts[:2]))
