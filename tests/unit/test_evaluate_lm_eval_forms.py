"""The multiple-choice forms of lm-evaluation-harness 0.4.13 that a task spec can write,
scored by us and by lm-eval's own evaluator (HFLM) on the same rows with the same tiny
random GPT: every request's log-likelihood within 1e-4, the same predictions, the same
accuracy.

- multiple input (WinoGrande's partial evaluation): doc_to_text gives the gold index,
  the choices are the contexts (the sentence up to the blank, each option filled in) and
  doc_to_target is the rest of the sentence, scored after each. lm-eval's side is its own
  `winogrande/default.yaml` with its Python functions; ours a Jinja translation.
- an empty doc_to_text (BLiMP): each choice scored whole after an empty context.
  lm-eval's side is its own `blimp/_template_yaml`.

Spec mistakes a copied lm-eval YAML brings are refused when the spec is read, naming the
file, the line and the key.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from stages.evaluate.evaluate_task import evaluate_task, plan_task
from stages.evaluate.prompts import example_requests
from stages.evaluate.scorers import load_scorer
from stages.evaluate.spec import SpecError, load_task_spec
from stages.evaluate.templates import TemplateRowError
from tests.support.lm_eval_tasks import FEWSHOT_SEED, task_from_lm_eval_yaml
from tests.support.pretrained_dirs import write_pretrained

os.environ.setdefault("HF_HUB_OFFLINE", "1")
from lm_eval import evaluator  # noqa: E402
from lm_eval.models.huggingface import HFLM  # noqa: E402

TOLERANCE = 1e-4

WINOGRANDE_SPEC = """\
name: winogrande_fixture
kind: multiple_choice
source: lm-eval winogrande/default.yaml, its Python functions written as templates
splits:
  test: {path: winogrande.jsonl, format: jsonl}
eval_split: test
doc_to_text: "{{ {'1': 0, '2': 1}[answer] }}"
doc_to_target: "{{ sentence[sentence.index('_') + 1:].strip() }}"
doc_to_choice: "{{ [sentence[:sentence.index('_')] + option1, sentence[:sentence.index('_')] + option2] }}"
metrics: [acc, acc_norm]
"""

BLIMP_SPEC = """\
name: blimp_fixture
kind: multiple_choice
splits:
  test: {path: blimp.jsonl, format: jsonl}
eval_split: test
doc_to_text: ""
doc_to_target: 0
doc_to_choice: "{{[sentence_good, sentence_bad]}}"
metrics: [acc]
"""

WINOGRANDE_ROWS = [
    ("The trophy doesn't fit into the brown suitcase because the _ is too large.", "trophy", "suitcase", "1"),
    ("The trophy doesn't fit into the brown suitcase because the _ is too small.", "trophy", "suitcase", "2"),
    ("Sarah lent her book to Maria because _ had finished reading it.", "Sarah", "Maria", "1"),
    ("Sarah lent her book to Maria because _ wanted something to read.", "Sarah", "Maria", "2"),
    ("The old man could not lift the heavy box, so he asked his son, since the _ was strong.", "man", "son", "2"),
    ("The dog chased the cat up the tree until the _ got tired of barking.", "dog", "cat", "1"),
    ("The river flooded the village because the _ rose after a week of rain.", "river", "village", "1"),
    ("Tom could not see the stage over Ben because _ was so short.", "Tom", "Ben", "1"),
]
BLIMP_ROWS = [
    ("The cats were sleeping in the sun.", "The cats was sleeping in the sun."),
    ("Who did the doctor visit yesterday?", "Who did the doctor visit Mary yesterday?"),
    ("Many people have seen these paintings.", "Many people has seen these paintings."),
    ("She herself wrote the letter.", "She himself wrote the letter."),
    ("The house that they built is old.", "The house that they built are old."),
    ("Every child likes a good story.", "Every child like a good story."),
]


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    # weight_scale 3: peaked predictions (see test_evaluate_task_parity.py)
    return write_pretrained(tmp_path_factory.mktemp("lm_eval_forms"), "gpt",
                            {"num_layers": 2, "hidden_size": 64, "num_heads": 2},
                            vocab_size=1024, max_seq_len=128, weight_scale=3.0)


@pytest.fixture(scope="module")
def ours(root):
    return load_scorer(root / "model", batch_size=8)


@pytest.fixture(scope="module")
def hflm(root):
    return HFLM(pretrained=str(root / "hf"), batch_size=8, device="cpu", softmax_dtype="float64")


@pytest.fixture(scope="module")
def task_files(tmp_path_factory):
    """(folder, WinoGrande rows, BLiMP rows): the data files and the two specs."""
    folder = tmp_path_factory.mktemp("forms_data")
    winogrande = [dict(zip(("sentence", "option1", "option2", "answer"), row)) for row in WINOGRANDE_ROWS]
    blimp = [{"sentence_good": good, "sentence_bad": bad} for good, bad in BLIMP_ROWS]
    for name, rows in (("winogrande", winogrande), ("blimp", blimp)):
        (folder / f"{name}.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    (folder / "winogrande.yaml").write_text(WINOGRANDE_SPEC, encoding="utf-8")
    (folder / "blimp.yaml").write_text(BLIMP_SPEC, encoding="utf-8")
    return folder, winogrande, blimp


def run_lm_eval(hflm, task) -> tuple[dict, list[dict]]:
    output = evaluator.evaluate(lm=hflm, task_dict={task.config.task: task}, log_samples=True, bootstrap_iters=0)
    samples = sorted(output["samples"][task.config.task], key=lambda sample: sample["doc_id"])
    return output["results"][task.config.task], samples


def assert_same_scores(spec, folder, shots, report, scores, samples, metrics):
    """Every request (context, continuation), demonstrations included, then every
    log-likelihood, prediction and score."""
    plan = plan_task(spec, folder, shots=shots, seed=FEWSHOT_SEED)
    mine_requests = [[(r.context, r.continuation) for r in plan.requests([position])]
                     for position in range(len(plan.selection))]
    assert mine_requests == [[tuple(args) for args in sample["arguments"]] for sample in samples]
    theirs = np.asarray([[ll for ll, _ in sample["filtered_resps"]] for sample in samples])
    mine = np.asarray([record["logprobs"] for record in report.examples])
    assert np.abs(mine - theirs).max() < TOLERANCE, np.abs(mine - theirs).max()
    for metric in metrics:
        assert [record[metric] for record in report.examples] == [sample[metric] for sample in samples], metric
        assert report.scores[metric].value == scores[f"{metric},none"], metric


@pytest.mark.parametrize("shots", [0, 2])
def test_winogrande_multiple_input_form_equals_lm_evals_own_task(shots, task_files, ours, hflm):
    folder, rows, _ = task_files
    spec = load_task_spec(folder / "winogrande.yaml")
    report = evaluate_task(spec, folder, ours, shots=shots, seed=FEWSHOT_SEED)
    task = task_from_lm_eval_yaml("winogrande/default.yaml", {"test": rows}, num_fewshot=shots,
                                  test_split="test", fewshot_split="test",
                                  metric_list=[{"metric": "acc"}, {"metric": "acc_norm"}])
    assert task.multiple_input == 2
    assert [(r.context, r.continuation) for r in example_requests(spec, 0, rows[0], "row 1", [])] == [
        ("The trophy doesn't fit into the brown suitcase because the trophy", " is too large."),
        ("The trophy doesn't fit into the brown suitcase because the suitcase", " is too large.")]
    assert all(r.context.count("\n\n") == shots for r in plan_task(spec, folder, shots=shots).requests())
    scores, samples = run_lm_eval(hflm, task)
    assert [record["gold"] for record in report.examples] == [task.doc_to_text(row) for row in rows]
    assert_same_scores(spec, folder, shots, report, scores, samples, ["acc", "acc_norm"])
    assert 0 < sum(record["pred"] == 0 for record in report.examples) < len(rows)  # not one choice throughout


def test_blimp_empty_context_form_equals_lm_evals_own_task(task_files, ours, hflm):
    folder, _, rows = task_files
    spec = load_task_spec(folder / "blimp.yaml")
    report = evaluate_task(spec, folder, ours, shots=0, seed=FEWSHOT_SEED)
    task = task_from_lm_eval_yaml("blimp/_template_yaml", {"test": rows}, test_split="test",
                                  task="blimp_fixture")
    assert [(r.context, r.continuation) for r in example_requests(spec, 0, rows[0], "row 1", [])] == [
        ("", " The cats were sleeping in the sun."), ("", " The cats was sleeping in the sun.")]
    scores, samples = run_lm_eval(hflm, task)
    assert [record["gold"] for record in report.examples] == [sample["target"] for sample in samples]
    assert_same_scores(spec, folder, 0, report, scores, samples, ["acc"])


def write_spec(tmp_path, text: str):
    path = tmp_path / "spec.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_a_python_function_of_an_lm_eval_yaml_is_named_with_its_file_line_and_key(tmp_path):
    path = write_spec(tmp_path, WINOGRANDE_SPEC.replace(
        "doc_to_target: \"{{ sentence[sentence.index('_') + 1:].strip() }}\"",
        "doc_to_target: !function preprocess_winogrande.doc_to_target"))
    with pytest.raises(SpecError, match=rf"^{path}:8: 'doc_to_target: !function preprocess_winogrande.doc_to_target' "
                                        r"is lm-eval's Python function; task specs run no Python"):
        load_task_spec(path)


def test_lm_eval_task_keys_say_what_to_write_here(tmp_path):
    path = write_spec(tmp_path, WINOGRANDE_SPEC + "output_type: multiple_choice\nprocess_docs: x\n")
    with pytest.raises(SpecError) as error:
        load_task_spec(path)
    assert str(error.value).splitlines() == [
        f"{path}:11: 'output_type' is an lm-eval task key; write kind: instead (multiple_choice; loglikelihood "
        "is cloze; loglikelihood_rolling is perplexity; generate_until is generation)",
        f"{path}:12: 'process_docs' is an lm-eval task key; a Python function over the rows is not supported: "
        "prepare the data file, or do it in the templates"]


def test_a_multiple_target_answer_is_refused_as_such(task_files):
    folder, rows, _ = task_files
    spec = load_task_spec(folder / "winogrande.yaml").model_copy(
        update={"doc_to_text": "{{sentence}}", "doc_to_target": "{{ [0, 1] }}"})
    with pytest.raises(TemplateRowError, match=r"^row 1: 'doc_to_target' gave a list \[0, 1\]: several right "
                                               r"answers \(lm-eval's multiple-target form\) are not supported"):
        example_requests(spec, 0, rows[0], "row 1", [])
