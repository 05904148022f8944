"""A choice longer than the model's whole context cannot be scored: cutting it would pit a
shorter (likelier) choice against its uncut siblings. Such an example is left out of the
task's score and counted (num_skipped) in the report, the summary and the manifest
metrics, instead of failing the whole task (the demo model's 128 tokens against PIQA's
longest solutions) or being scored on a wrong slice (lm-eval's HFLM)."""

from __future__ import annotations

import json
import math

import pytest

from stages.evaluate.evaluate_task import evaluate_task
from stages.evaluate.requests import LoglikelihoodRequest
from stages.evaluate.run import summary_table
from stages.evaluate.scorers import load_scorer
from stages.evaluate.spec import load_task_spec
from stages.report.evaluation import _task_entry
from stages.report.evaluation_render import evaluation_markdown
from tests.support.pretrained_dirs import write_pretrained

CONTEXT = 32
LONG = " and then" * 40  # far more than 32 tokens


@pytest.fixture(scope="module")
def scorer(tmp_path_factory):
    root = write_pretrained(tmp_path_factory.mktemp("too_long"), "gpt",
                            {"num_layers": 1, "hidden_size": 32, "num_heads": 2},
                            vocab_size=512, max_seq_len=CONTEXT)
    return load_scorer(root / "model", batch_size=4)


def write_task(tmp_path, rows: list[dict]):
    data = tmp_path / "choices.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    spec = tmp_path / "choices.yaml"
    spec.write_text(
        "name: choices\nkind: multiple_choice\n"
        "splits:\n  validation: {path: choices.jsonl, format: jsonl}\n"
        "eval_split: validation\n"
        "doc_to_text: '{{ question }}'\ndoc_to_target: label\n"
        "doc_to_choice: '{{ [a, b] }}'\nmetrics: [acc]\n", encoding="utf-8")
    return load_task_spec(spec)


def test_a_continuation_longer_than_the_context_is_answered_unscored(scorer):
    short = LoglikelihoodRequest(0, 0, "The cat sat on the", " mat")
    long = LoglikelihoodRequest(0, 1, "The cat sat on the", LONG)
    results = scorer.loglikelihood([short, long])
    assert not results[0].too_long and math.isfinite(results[0].logprob)
    assert results[1].too_long and math.isnan(results[1].logprob) and results[1].num_tokens > CONTEXT
    # The fitting request's score does not depend on its unscorable neighbour.
    assert scorer.loglikelihood([short])[0].logprob == pytest.approx(results[0].logprob, abs=1e-6)


def test_an_empty_continuation_is_still_a_task_error(scorer):
    with pytest.raises(ValueError, match="no tokens to score"):
        scorer.loglikelihood([LoglikelihoodRequest(3, 1, "The cat", "")])


def test_the_example_is_left_out_counted_and_shown(scorer, tmp_path):
    rows = [{"question": "The cat sat on the", "a": " mat", "b": " hat", "label": 0},
            {"question": "A dog ran to the", "a": " park", "b": LONG, "label": 1},
            {"question": "The sun is", "a": " hot", "b": " cold", "label": 0}]
    report = evaluate_task(write_task(tmp_path, rows), tmp_path, scorer)
    assert (report.num_examples, report.num_skipped) == (2, 1)
    assert [record["example"] for record in report.examples] == [0, 2]
    assert report.metrics()["num_skipped"] == 1
    assert "1 of 3 examples not scored" in summary_table([report])
    # results.json's entry as the report reads it
    evaluation = {"choices": _task_entry("choices", report.to_dict())}
    markdown = "\n".join(evaluation_markdown({"evaluation": evaluation}))
    assert "1 not scored: longer than the context" in markdown


def test_a_task_with_nothing_scorable_fails_naming_the_task(scorer, tmp_path):
    rows = [{"question": "A dog ran to the", "a": LONG, "b": LONG + " now", "label": 1}]
    with pytest.raises(ValueError, match="'choices': none of its 1 evaluated examples could be scored"):
        evaluate_task(write_task(tmp_path, rows), tmp_path, scorer)
