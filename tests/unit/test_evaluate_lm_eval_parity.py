"""Our GPT scorer and lm-evaluation-harness 0.4.13's HFLM give the same answers to the same
requests on the same model: a random 2-layer GPT (context 128) saved as the pretrain stage
saves it, `model/` for us and the exported `hf/` folder for HFLM (transformers'
GPT2LMHeadModel + AutoTokenizer). Per request: log-likelihood within 1e-4 (measured: 1e-5)
and the same is_greedy; rolling log-likelihood of documents longer than the context within 1e-4; greedy
generation equal to HFLM's generate_until and to transformers' greedy generate."""

from __future__ import annotations

import json
import os

import pytest
import torch

from stages.evaluate.requests import GenerationRequest, LoglikelihoodRequest, RollingRequest
from stages.evaluate.scorers import GPTScorer, load_scorer
from tests.conftest import DATA_DIR
from tests.support.pretrained_dirs import book_paragraphs, write_pretrained

os.environ.setdefault("HF_HUB_OFFLINE", "1")
import lm_eval.models.huggingface as lm_eval_huggingface  # the .[eval] extra; make install installs it
from lm_eval.api.instance import Instance  # noqa: E402

CONTEXT = 128
TOLERANCE = 1e-4


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    # weight_scale 3: peaked predictions, so that is_greedy and generation test real argmaxes.
    return write_pretrained(tmp_path_factory.mktemp("parity"), "gpt", {"num_layers": 2, "hidden_size": 64, "num_heads": 2},
                            vocab_size=1024, max_seq_len=CONTEXT, weight_scale=3.0)


@pytest.fixture(scope="module")
def ours(root) -> GPTScorer:
    return load_scorer(root / "model", batch_size=4)


@pytest.fixture(scope="module")
def theirs(root):
    # float64 log-softmax: HFLM sums a row's log-probs in the softmax dtype, and a float32
    # total of ~2000 nats is only good to ~1e-4 (float32 spacing at 2048 is 2.4e-4); the
    # default gives differences up to 8e-5 here, float64 leaves the models' own (1e-5).
    return lm_eval_huggingface.HFLM(pretrained=str(root / "hf"), batch_size=4, device="cpu", softmax_dtype="float64")


def piqa(num_examples: int) -> list[LoglikelihoodRequest]:
    requests = []
    with open(DATA_DIR / "eval" / "piqa" / "valid.jsonl", encoding="utf-8") as lines:
        for example, line in zip(range(num_examples), lines):
            doc = json.loads(line)
            requests += [LoglikelihoodRequest(example, choice, f"Question: {doc['goal']}\nAnswer:", f" {doc[key]}")
                         for choice, key in enumerate(("sol1", "sol2"))]
    return requests


def parity_requests(ours: GPTScorer) -> list[LoglikelihoodRequest]:
    story = book_paragraphs(20_000)[12:]
    greedy = [ours.generate([GenerationRequest(0, context, until=(), max_new_tokens=n)])[0].text
              for context, n in (("The hills of Dunwich", 5), (story[1][:200], 1))]
    requests = piqa(3)  # 6: two choices sharing each context
    requests += [LoglikelihoodRequest(10, choice, "Question: Which is a color?\nAnswer:", f" {word}")
                 for choice, word in enumerate(("red", "table", "the sound of rain", "blue"))]
    requests += [
        LoglikelihoodRequest(11, 0, "", "The Dunwich Horror"),  # empty context: <|endoftext|> first
        LoglikelihoodRequest(12, 0, "It was a dark and stormy ", "night"),  # the space moves over
        LoglikelihoodRequest(13, 0, story[0], " and the hills were silent."),  # far longer than 128 tokens
        LoglikelihoodRequest(14, 0, story[2][:300], story[2][300:480]),  # context + continuation > 129
        LoglikelihoodRequest(15, 0, "The hills of Dunwich", greedy[0]),  # is_greedy: the model's own words
        LoglikelihoodRequest(16, 0, story[1][:200], greedy[1]),
        LoglikelihoodRequest(17, 0, "Wilbur Whateley", "."),
        LoglikelihoodRequest(17, 1, "Wilbur Whateley", ","),
        LoglikelihoodRequest(18, 0, story[3][:150], story[3][150:190]),
        LoglikelihoodRequest(19, 0, "He said, \"", "Yes.\""),
    ]
    return requests


def test_loglikelihood_matches_lm_eval_per_request(ours, theirs):
    requests = parity_requests(ours)
    assert len(requests) == 20
    results = ours.loglikelihood(requests)
    expected = theirs.loglikelihood([Instance("loglikelihood", {}, (r.context, r.continuation), i)
                                     for i, r in enumerate(requests)], disable_tqdm=True)
    differences = [abs(result.logprob - logprob) for result, (logprob, _) in zip(results, expected, strict=True)]
    assert max(differences) < TOLERANCE, list(zip(requests, differences))
    assert [r.is_greedy for r in results] == [greedy for _, greedy in expected]
    assert results[14].is_greedy and results[15].is_greedy  # the test really covers argmaxes
    assert results[12].truncated and results[13].truncated and not any(r.truncated for r in results[:12])


def test_rolling_loglikelihood_matches_lm_eval_disjoint_windows(ours, theirs):
    story = book_paragraphs(20_000)[12:]
    documents = [story[4], story[5], story[7], "A short one."]  # 198, 252, 291 tokens: 2-3 windows
    results = ours.loglikelihood_rolling([RollingRequest(i, text) for i, text in enumerate(documents)])
    assert [r.num_tokens > CONTEXT for r in results] == [True, True, True, False]
    expected = theirs.loglikelihood_rolling([Instance("loglikelihood_rolling", {}, (text,), i)
                                             for i, text in enumerate(documents)], disable_tqdm=True)
    differences = [abs(result.logprob - logprob) for result, logprob in zip(results, expected, strict=True)]
    assert max(differences) < TOLERANCE, differences


def test_greedy_generation_matches_lm_eval_and_transformers(root, ours, theirs):
    import transformers
    story = book_paragraphs(20_000)[12:]
    contexts = ["The hills of Dunwich", "Wilbur Whateley was", story[1][:300], "It was a dark and stormy night"]
    results = ours.generate([GenerationRequest(i, c, until=(".",), max_new_tokens=16) for i, c in enumerate(contexts)])
    expected = theirs.generate_until([Instance("generate_until", {}, (c, {"until": ["."], "max_gen_toks": 16,
                                                                        "do_sample": False}), i)
                                      for i, c in enumerate(contexts)], disable_tqdm=True)
    assert [r.text for r in results] == expected
    model = transformers.AutoModelForCausalLM.from_pretrained(root / "hf").eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(root / "hf")
    for context in contexts[:2]:
        ids = tokenizer(context, return_tensors="pt").input_ids
        with torch.no_grad():
            out = model.generate(ids, max_new_tokens=12, do_sample=False, pad_token_id=tokenizer.pad_token_id)
        new = out[0, ids.size(1):].tolist()
        new = new[:new.index(ours.eot_id)] if ours.eot_id in new else new
        [result] = ours.generate([GenerationRequest(0, context, until=(), max_new_tokens=12)])
        assert result.text == tokenizer.decode(new)
