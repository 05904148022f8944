"""Whole tasks scored by us and by lm-evaluation-harness 0.4.13's own evaluator agree: the
same tiny random GPT (context 128; `model/` for us, the exported `hf/` for HFLM), the same
rows (a slice of each file, read once and handed to both), seed 1234.

    ours   = evaluate_task(spec restricted to rows [start, stop), data_dir, load_scorer(model/), shots=k)
    theirs = lm_eval.evaluator.evaluate(HFLM(hf/), {task: lm-eval task on those rows}, log_samples=True)

LAMBADA (cloze) and PIQA (multiple choice) at 0 and 2 shots with our spec's templates on
lm-eval's side (plus LAMBADA passages ending in the model's own greedy words, so that cloze
accuracy is not 0 on both sides); WikiText-2 (rolling perplexity) with lm-eval's own
`wikitext` task (its Python detokenizer and word/byte counts). Accuracies and is_greedy
equal exactly; per-example log-likelihoods within 1e-4 (measured: up to 2e-5); perplexity,
word/byte perplexity and bits per byte within 1e-6 relative (measured: up to 2e-7).
"""

from __future__ import annotations

import json
import math
import os
import re

import numpy as np
import pytest

from stages.evaluate.evaluate_task import evaluate_task
from stages.evaluate.readers import read_task_data
from stages.evaluate.requests import GenerationRequest
from stages.evaluate.scorers import load_scorer
from stages.evaluate.spec import TaskSpec, resolve_task_spec
from tests.support.lm_eval_tasks import FEWSHOT_SEED, task_from_lm_eval_yaml, task_from_spec
from tests.support.pretrained_dirs import write_pretrained

os.environ.setdefault("HF_HUB_OFFLINE", "1")
from lm_eval import evaluator  # noqa: E402  (the .[eval] extra; make install installs it)
from lm_eval.models.huggingface import HFLM  # noqa: E402

CONTEXT = 128
TOLERANCE = 1e-4           # per request, as in test_evaluate_lm_eval_parity.py
LAMBADA_ROWS = (0, 40)
GREEDY_PASSAGES = (0, 80)  # about 2 in 5 of the model's continuations start with a word
# PIQA rows 29 and 62 have a solution longer than the 128-token context: our scorer leaves
# such an example out and counts it (HFLM scores a logits slice shorter than the solution),
# so the compared rows lie between them.
PIQA_ROWS = (30, 62)
WIKITEXT_ROWS = (27, 30)   # three articles: 6,871, 113 and 1,350 characters (one and several windows)


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    # weight_scale 3: peaked predictions, so that argmaxes (is_greedy, acc_norm) are decided by
    # margins well above the two implementations' float differences.
    return write_pretrained(tmp_path_factory.mktemp("task_parity"), "gpt",
                            {"num_layers": 2, "hidden_size": 64, "num_heads": 2},
                            vocab_size=1024, max_seq_len=CONTEXT, weight_scale=3.0)


@pytest.fixture(scope="module")
def ours(root):
    return load_scorer(root / "model", batch_size=8)


@pytest.fixture(scope="module")
def hflm(root):
    # float64 log-softmax: see test_evaluate_lm_eval_parity.py (float32 sums of long rows
    # are only good to ~1e-4).
    return HFLM(pretrained=str(root / "hf"), batch_size=8, device="cpu", softmax_dtype="float64")


def rows_only(spec: TaskSpec, rows: tuple[int, int]) -> TaskSpec:
    """The spec with its evaluated (and demonstration) file cut to `rows`; labels files
    (PIQA's) are attached before the cut, so they stay paired."""
    splits = {name: file.model_copy(update={"rows": rows}) for name, file in spec.splits.items()}
    return spec.model_copy(update={"splits": splits})


def run_lm_eval(hflm, task) -> tuple[dict, list[dict]]:
    """lm-eval's evaluator on one task: its scores ("acc,none", ...) and logged samples in
    document order."""
    output = evaluator.evaluate(lm=hflm, task_dict={task.config.task: task}, log_samples=True,
                                bootstrap_iters=0)
    samples = sorted(output["samples"][task.config.task], key=lambda sample: sample["doc_id"])
    return output["results"][task.config.task], samples


def assert_cloze_equal(report, scores, samples, num_rows):
    assert len(samples) == len(report.examples) == num_rows
    theirs = [sample["filtered_resps"][0] for sample in samples]  # (loglikelihood, is_greedy)
    differences = [abs(record["logprob"] - ll) for record, (ll, _) in zip(report.examples, theirs)]
    assert max(differences) < TOLERANCE, differences
    assert [record["is_greedy"] for record in report.examples] == [greedy for _, greedy in theirs]
    assert report.scores["acc"].value == scores["acc,none"]
    assert math.isclose(report.scores["perplexity"].value, scores["perplexity,none"], rel_tol=1e-6)


@pytest.mark.parametrize("shots", [0, 2])
def test_lambada_cloze_equals_lm_evals_evaluator(shots, data_dir, ours, hflm):
    spec = rows_only(resolve_task_spec("lambada_openai"), LAMBADA_ROWS)
    report = evaluate_task(spec, data_dir, ours, shots=shots, seed=FEWSHOT_SEED)
    rows = read_task_data(spec, data_dir)[spec.eval_split].rows
    scores, samples = run_lm_eval(hflm, task_from_spec(spec, rows, rows, num_fewshot=shots))
    assert_cloze_equal(report, scores, samples, LAMBADA_ROWS[1] - LAMBADA_ROWS[0])
    if shots:
        assert report.num_truncated > 0  # 2 demonstrations overflow 128 tokens: both cut from the left


def test_lambada_accuracy_on_the_models_own_words_equals_lm_evals(data_dir, tmp_path, ours, hflm):
    """A random model never guesses LAMBADA's words (acc 0 on both sides proves little), so
    here each passage ends in the word the model itself generates greedily: some targets
    are then its argmax (11 of 39), others not (BPE splits the word, standing alone,
    differently), and lm-eval must agree on which."""
    spec = rows_only(resolve_task_spec("lambada_openai"), GREEDY_PASSAGES)
    passages = [" ".join(row["text"].split(" ")[:-1]) for row in read_task_data(spec, data_dir)["test"].rows]
    generated = ours.generate([GenerationRequest(i, passage, until=(), max_new_tokens=4)
                               for i, passage in enumerate(passages)])
    rows = [{"text": passage + word.group(0)} for passage, result in zip(passages, generated)
            if (word := re.match(r" \S+", result.text))]
    path = tmp_path / spec.splits["test"].path
    path.parent.mkdir(parents=True)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    spec = rows_only(spec, (0, len(rows)))
    report = evaluate_task(spec, tmp_path, ours, shots=0, seed=FEWSHOT_SEED)
    scores, samples = run_lm_eval(hflm, task_from_spec(spec, rows, rows))
    assert_cloze_equal(report, scores, samples, len(rows))
    assert len(rows) >= 20 and 0 < report.scores["acc"].value < 1, (len(rows), report.scores["acc"].value)


@pytest.mark.parametrize("shots", [0, 2])
def test_piqa_multiple_choice_equals_lm_evals_evaluator(shots, data_dir, ours, hflm):
    spec = rows_only(resolve_task_spec("piqa"), PIQA_ROWS)
    report = evaluate_task(spec, data_dir, ours, shots=shots, seed=FEWSHOT_SEED)
    rows = read_task_data(spec, data_dir)[spec.eval_split].rows
    scores, samples = run_lm_eval(hflm, task_from_spec(spec, rows, rows, num_fewshot=shots))
    assert len(samples) == len(report.examples) == PIQA_ROWS[1] - PIQA_ROWS[0]
    assert [sample["target"] for sample in samples] == [record["gold"] for record in report.examples]
    theirs = np.asarray([[ll for ll, _ in sample["filtered_resps"]] for sample in samples])
    mine = np.asarray([record["logprobs"] for record in report.examples])
    assert np.abs(mine - theirs).max() < TOLERANCE, np.abs(mine - theirs).max()
    assert [record["acc"] for record in report.examples] == [sample["acc"] for sample in samples]
    assert [record["acc_norm"] for record in report.examples] == [sample["acc_norm"] for sample in samples]
    assert report.scores["acc"].value == scores["acc,none"]
    assert report.scores["acc_norm"].value == scores["acc_norm,none"]


def test_wikitext_perplexities_equal_lm_evals_own_task(data_dir, ours, hflm):
    spec = rows_only(resolve_task_spec("wikitext2"), WIKITEXT_ROWS)
    report = evaluate_task(spec, data_dir, ours, shots=0, seed=FEWSHOT_SEED)
    pages = [{"page": row["text"]} for row in read_task_data(spec, data_dir)[spec.eval_split].rows]
    task = task_from_lm_eval_yaml("wikitext/wikitext.yaml", {"test": pages}, test_split="test")
    scores, samples = run_lm_eval(hflm, task)
    assert len(samples) == len(report.examples) == WIKITEXT_ROWS[1] - WIKITEXT_ROWS[0]
    assert [record["num_tokens"] > CONTEXT for record in report.examples] == [True, False, True]
    differences = [abs(record["logprob"] - sample["filtered_resps"][0])
                   for record, sample in zip(report.examples, samples)]
    assert max(differences) < TOLERANCE, differences
    for metric in ("word_perplexity", "byte_perplexity", "bits_per_byte"):
        assert math.isclose(report.scores[metric].value, scores[f"{metric},none"], rel_tol=1e-6), metric
