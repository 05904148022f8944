"""Our prompts, demonstrations and choice predictions equal lm-evaluation-harness 0.4.13's on
the same rows (lm-eval is the `.[eval]` extra; `make install` installs it).

lm-eval is given our rows through `custom_dataset` and our spec's templates, split names as
a parity run on our files would declare them (tests/support/lm_eval_tasks.py), seed 1234; every
context and continuation it builds must equal ours, demonstrations included. Where
lm-eval's task is Python code (COPA, WikiText) or reads Hugging Face's layout (ARC), its
own functions and templates are run on the rows and compared with our templates' output.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest
from lm_eval.api import metrics as lm_metrics

from stages.evaluate.evaluate_task import plan_task, score_task
from stages.evaluate.metrics import choice_predictions
from stages.evaluate.prompts import answer_text, doc_choices, doc_target, doc_text
from stages.evaluate.readers import Rows, read_task_data
from stages.evaluate.requests import RollingResult
from stages.evaluate.spec import resolve_task_spec
from tests.support.lm_eval_tasks import FEWSHOT_SEED, LM_EVAL_TASKS, task_from_lm_eval_yaml, task_from_spec

PROMPT_TASKS = ["arc_challenge", "arc_easy", "boolq", "cola", "copa", "lambada_openai", "mrpc", "piqa",
                "qnli", "rte", "squad", "sst2", "wnli"]
NUM_DEMO_ROWS = 400  # a separate demonstration split (GLUE train) is cut to its first rows, on both sides


@functools.lru_cache(maxsize=None)
def task_data(name: str, data_dir) -> dict[str, Rows]:
    return read_task_data(resolve_task_spec(name), data_dir)


def first_rows(rows: Rows, count: int) -> Rows:
    return Rows(path=rows.path, rows=rows.rows[:count], where=rows.where[:count])


def lm_eval_arguments(task, doc, doc_id: int, shots: int) -> list[tuple]:
    """What lm-eval's build_all_requests asks the model for one document."""
    context = task.fewshot_context(doc, num_fewshot=shots)
    instances = task.construct_requests(doc=doc, ctx=context, metadata=("t", doc_id, 1))
    return [tuple(i.arguments) for i in (instances if isinstance(instances, list) else [instances])]


def our_arguments(requests) -> list[tuple]:
    return [(r.context, r.continuation) if hasattr(r, "continuation") else (r.context, {"until": list(r.until)})
            for r in requests]


@pytest.mark.parametrize(("shots", "num_rows"), [(0, 10), (3, 25)])
@pytest.mark.parametrize("name", PROMPT_TASKS)
def test_contexts_and_continuations_equal_lm_evals(name, shots, num_rows, data_dir):
    spec = resolve_task_spec(name)
    full = task_data(name, data_dir)
    data = {split: first_rows(rows, num_rows if split == spec.eval_split else NUM_DEMO_ROWS)
            for split, rows in full.items()}
    plan = plan_task(spec, data_dir, shots=shots, seed=FEWSHOT_SEED, data=data)
    requests = plan.requests()
    task = task_from_spec(spec, plan.eval_rows.rows, plan.demo_rows.rows, num_fewshot=shots)
    docs = list(task.eval_docs)
    assert len(docs) == len(plan.selection) == num_rows
    for doc_id, doc in enumerate(docs):  # in order: lm-eval's sampler is one seeded stream
        ours = our_arguments([r for r in requests if r.example == doc_id])
        assert ours == lm_eval_arguments(task, doc, doc_id, shots), f"{name} {shots}-shot row {doc_id}"
    if shots:
        contexts = {r.context for r in requests}
        assert all(c.count(spec.fewshot_delimiter) >= shots for c in contexts)  # demonstrations are there


def test_copa_templates_equal_lm_evals_python_functions(data_dir):
    utils = _lm_eval_module("super_glue/copa/utils.py")
    spec = resolve_task_spec("copa")
    data = task_data("copa", data_dir)
    rows = [(row, where) for split in data.values() for row, where in zip(split.rows, split.where)]
    assert len(rows) == 500
    for row, where in rows:
        assert doc_text(spec, row, where) == utils.doc_to_text(row), where
        assert doc_choices(spec, row, where) == utils.doc_to_choice(row), where
        assert answer_text(spec, row, where) == utils.doc_to_target(row), where


def test_copa_requests_equal_lm_evals_own_task_3_shot(data_dir):
    """All 100 validation rows, 3 demonstrations from the 400 training rows, lm-eval's own
    copa task (Python templates) against our Jinja spec."""
    spec = resolve_task_spec("copa")
    data = task_data("copa", data_dir)
    plan = plan_task(spec, data_dir, shots=3, seed=FEWSHOT_SEED, data=data)
    requests = plan.requests()
    task = task_from_lm_eval_yaml("super_glue/copa/default.yaml",
                                  {"validation": data["validation"].rows, "train": data["train"].rows},
                                  num_fewshot=3, validation_split="validation", training_split="train")
    docs = list(task.eval_docs)
    assert len(docs) == 100
    for doc_id, doc in enumerate(docs):
        ours = our_arguments([r for r in requests if r.example == doc_id])
        assert ours == lm_eval_arguments(task, doc, doc_id, 3), f"copa row {doc_id}"


def test_wikitext_detokenizer_and_document_scores_equal_lm_evals(data_dir):
    preprocess = _lm_eval_module("wikitext/preprocess_wikitext.py")
    spec = resolve_task_spec("wikitext2")
    plan = plan_task(spec, data_dir)
    requests = plan.requests()
    pages = [row["text"] for row in plan.eval_rows.rows]
    assert len(pages) == len(requests) == 62
    for request, page in zip(requests, pages):
        assert request.text == preprocess.wikitext_detokenizer({"page": page})
    # Made-up document log-likelihoods, the same on both sides: lm-eval's process_results
    # and aggregations against our per-document counts and scores.
    rng = np.random.default_rng(0)
    logprobs = [-float(rng.uniform(1.5, 4.0)) * len(r.text) / 4 for r in requests]
    answered = [(r, RollingResult(logprob=ll, num_tokens=max(1, len(r.text) // 4)))
                for r, ll in zip(requests, logprobs)]
    report = score_task(plan, answered)
    per_doc = [preprocess.process_results({"page": page}, [ll]) for page, ll in zip(pages, logprobs)]
    for record, result in zip(report.examples, per_doc):
        assert (record["logprob"], record["num_words"]) == result["word_perplexity"]
        assert (record["logprob"], record["num_bytes"]) == result["byte_perplexity"]
    expected = {"word_perplexity": lm_metrics.weighted_perplexity([r["word_perplexity"] for r in per_doc]),
                "byte_perplexity": lm_metrics.weighted_perplexity([r["byte_perplexity"] for r in per_doc]),
                "bits_per_byte": lm_metrics.bits_per_byte([r["bits_per_byte"] for r in per_doc])}
    for metric, value in expected.items():
        assert math.isclose(report.scores[metric].value, value, rel_tol=1e-12), metric


def arc_hugging_face_row(row: dict) -> dict:
    """allenai/ai2_arc's row for an original ARC-V1-Feb2018 row (its loading script's mapping)."""
    choices = row["question"]["choices"]
    return {"id": row["id"], "question": row["question"]["stem"], "answerKey": row["answerKey"],
            "choices": {"text": [c["text"] for c in choices], "label": [c["label"] for c in choices]}}


@pytest.mark.parametrize("name", ["arc_challenge", "arc_easy"])
def test_arc_templates_on_the_original_layout_equal_lm_evals_on_hugging_faces(name, data_dir):
    spec = resolve_task_spec(name)
    rows = task_data(name, data_dir)[spec.eval_split]
    task = task_from_lm_eval_yaml(f"arc/{name}.yaml", {"test": [arc_hugging_face_row(r) for r in rows.rows]},
                                  test_split="test")
    docs = list(task.eval_docs)
    assert len(docs) == len(rows) > 1000
    for row, where, doc in zip(rows.rows, rows.where, docs):
        choices = doc_choices(spec, row, where)
        assert doc_text(spec, row, where) == task.doc_to_text(doc), where
        assert choices == task.doc_to_choice(doc), where
        assert doc_target(spec, row, where, choices) == task.doc_to_target(doc), where


def arc_rows_for_predictions(rows: Rows, count: int) -> list[tuple[dict, str]]:
    """Every row whose choices are not ASCII (acc_bytes differs from acc_norm only there),
    then the first rows, `count` in all."""
    non_ascii = [i for i, row in enumerate(rows.rows)
                 if not all(choice["text"].isascii() for choice in row["question"]["choices"])]
    assert len(non_ascii) >= 5, "the ARC-Challenge test file should hold rows with non-ASCII choices"
    chosen = non_ascii + [i for i in range(len(rows)) if i not in non_ascii][:count - len(non_ascii)]
    return [(rows.rows[i], rows.where[i]) for i in sorted(chosen)]


def made_up_logprobs(choices: list[str], rng: np.random.Generator) -> list[list[float]]:
    """Several sets of log-likelihoods per row: random ones, and ones that tie exactly under
    each normalisation (ties go to the first index in both implementations)."""
    chars = np.asarray([len(c) for c in choices], dtype=np.float64)
    num_bytes = np.asarray([len(c.encode("utf-8")) for c in choices], dtype=np.float64)
    return [list(-rng.uniform(1.0, 60.0, size=len(choices))),
            list(-rng.uniform(0.5, 3.0) * chars + rng.normal(0, 0.5, size=len(choices))),
            list(-rng.uniform(0.5, 3.0) * num_bytes + rng.normal(0, 0.5, size=len(choices))),
            list(-2.5 * chars), list(-2.5 * num_bytes), [-7.0] * len(choices)]


def test_choice_predictions_equal_lm_evals_process_results(data_dir):
    spec = resolve_task_spec("arc_challenge")
    chosen = arc_rows_for_predictions(task_data("arc_challenge", data_dir)[spec.eval_split], 200)
    docs = [arc_hugging_face_row(row) for row, _ in chosen]
    task = task_from_lm_eval_yaml("arc/arc_challenge.yaml", {"test": docs}, test_split="test",
                                  metric_list=[{"metric": m, "aggregation": "mean", "higher_is_better": True}
                                               for m in ("acc", "acc_norm", "acc_bytes")])
    rng = np.random.default_rng(1234)
    differing = {"acc_norm": 0, "acc_bytes": 0}
    for (row, where), doc in zip(chosen, docs):
        choices = doc_choices(spec, row, where)
        for logprobs in made_up_logprobs(choices, rng):
            ours = choice_predictions(logprobs, choices)
            # lm-eval reports only whether each argmax hit the gold; asking with every choice
            # as the gold in turn reveals each argmax.
            theirs = {"pred": [], "pred_norm": [], "pred_bytes": []}
            for label in doc["choices"]["label"]:
                result = task.process_results({**doc, "answerKey": label}, [(ll, False) for ll in logprobs])
                for key, metric in (("pred", "acc"), ("pred_norm", "acc_norm"), ("pred_bytes", "acc_bytes")):
                    theirs[key].append(result[metric])
            for key, hits in theirs.items():
                assert sum(hits) == 1 and hits.index(1.0) == ours[key], (where, key, logprobs, ours, hits)
            differing["acc_norm"] += ours["pred_norm"] != ours["pred"]
            differing["acc_bytes"] += ours["pred_bytes"] != ours["pred_norm"]
    assert differing["acc_norm"] > 50 and differing["acc_bytes"] > 0, differing  # the cases are covered


def _lm_eval_module(relative_path: str):
    """A Python file of lm-eval's tasks (not an importable package), loaded as lm-eval loads it."""
    import importlib.util

    path = LM_EVAL_TASKS / relative_path
    module_spec = importlib.util.spec_from_file_location(f"lm_eval_tasks_{path.stem}_{path.parent.name}", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module
