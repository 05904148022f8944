"""The GPT scorer against hand-computed sums of the model's own log-softmax: loglikelihood
(shared contexts, one-token and empty-context requests, left truncation), is_greedy,
rolling windows (disjoint and strided), batch-size invariance, greedy generation with
stop strings. A random model of context 32 over a BPE tokenizer trained on a real book."""

from __future__ import annotations

import pytest
import torch

from stages.evaluate.requests import GenerationRequest, LoglikelihoodRequest, RollingRequest
from stages.evaluate.scorers import GPTScorer, load_scorer
from stages.models.generation import generate
from tests.support.pretrained_dirs import book_paragraphs, write_pretrained

CONTEXT = 32


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    root = write_pretrained(tmp_path_factory.mktemp("gpt"), "gpt", {"num_layers": 2, "hidden_size": 64, "num_heads": 2},
                            vocab_size=512, max_seq_len=CONTEXT)
    return root / "model"


@pytest.fixture(scope="module")
def scorer(model_dir) -> GPTScorer:
    return load_scorer(model_dir, batch_size=4)


def log_softmax_of(scorer: GPTScorer, inputs: list[int]) -> torch.Tensor:
    """(T, V): row t is the model's log-distribution of the token after inputs[:t + 1]."""
    with torch.no_grad():
        logits = scorer.model(torch.tensor([inputs]))
    return logits[0].float().log_softmax(-1)


def by_hand(scorer: GPTScorer, context: str, continuation: str) -> tuple[float, bool]:
    """lm-eval's definition, written out: move the context's trailing space to the
    continuation, tokenize, cut from the left to max_length + 1
    tokens, drop the last, read the continuation's log-probs at the last positions."""
    spaces = context[len(context.rstrip()):]
    context, continuation = context.rstrip(), spaces + continuation
    encode = scorer.tokenizer.encode
    context_ids = encode(context, add_special_tokens=False).ids or [scorer.eot_id]
    whole = encode(context + continuation, add_special_tokens=False).ids
    continuation_ids = whole[len(context_ids):] if context else whole
    inputs = (context_ids + continuation_ids)[-(CONTEXT + 1):][:-1]
    log_probs = log_softmax_of(scorer, inputs)[-len(continuation_ids):]
    targets = torch.tensor(continuation_ids)
    total = log_probs.gather(1, targets[:, None]).sum().item()
    return total, bool((log_probs.argmax(-1) == targets).all())


def greedy_text(scorer: GPTScorer, context: str, num_tokens: int) -> str:
    ids = scorer.tokenizer.encode(context, add_special_tokens=False).ids
    out = generate(scorer.model, torch.tensor([ids]), num_tokens)[0, len(ids):].tolist()
    return scorer.tokenizer.decode(out)


def test_loglikelihood_equals_the_sum_of_the_models_log_probs(scorer):
    paragraph = book_paragraphs(8000)[12]
    question = "Which way did they go?"
    requests = [
        LoglikelihoodRequest(0, 0, question, " Up the hill."),  # three choices share the context
        LoglikelihoodRequest(0, 1, question, " Down to the river, slowly."),
        LoglikelihoodRequest(0, 2, question, " North"),
        LoglikelihoodRequest(1, 0, "The answer is", " A"),  # one-token choices: no branches
        LoglikelihoodRequest(1, 1, "The answer is", " B"),
        LoglikelihoodRequest(2, 0, "", "Whateley"),  # empty context: <|endoftext|> first
        LoglikelihoodRequest(3, 0, "It was a dark ", "night"),  # the space moves to the continuation
        LoglikelihoodRequest(4, 0, paragraph, " and so it ended."),  # cut from the left
        LoglikelihoodRequest(0, 0, question, " Up the hill."),  # a duplicate
    ]
    results = scorer.loglikelihood(requests)
    for request, result in zip(requests, results, strict=True):
        expected, expected_greedy = by_hand(scorer, request.context, request.continuation)
        assert result.logprob == pytest.approx(expected, abs=1e-4), request
        assert result.is_greedy == expected_greedy
    assert [r.truncated for r in results] == [False] * 7 + [True, False]
    assert results[6].num_tokens == len(scorer.tokenizer.encode(" night").ids)
    assert results[0] == results[-1]


def test_shared_context_rows_equal_separate_rows(scorer):
    context = "Question: How do you open a jar?\nAnswer:"
    choices = [" Twist the lid to the left.", " Hit it with a hammer until the glass breaks.", " Ask"]
    together = scorer.loglikelihood([LoglikelihoodRequest(0, i, context, c) for i, c in enumerate(choices)])
    alone = [scorer.loglikelihood([LoglikelihoodRequest(0, 0, context, c)])[0] for c in choices]
    for joint, single in zip(together, alone, strict=True):
        assert joint.logprob == pytest.approx(single.logprob, abs=1e-5)
        assert joint.is_greedy == single.is_greedy


def test_is_greedy_for_the_models_own_continuation(scorer):
    context = "The old house stood on the hill"
    greedy = greedy_text(scorer, context, 6)
    results = scorer.loglikelihood([LoglikelihoodRequest(0, 0, context, greedy),
                                    LoglikelihoodRequest(0, 1, context, " and nothing else")])
    assert results[0].is_greedy
    assert not results[1].is_greedy


def test_results_do_not_depend_on_batch_size(model_dir):
    paragraphs = book_paragraphs(20000)[10:22]
    requests = [LoglikelihoodRequest(i, 0, p[:40], p[40:70]) for i, p in enumerate(paragraphs) if len(p) > 70]
    one = load_scorer(model_dir, batch_size=1).loglikelihood(requests)
    many = load_scorer(model_dir, batch_size=5).loglikelihood(requests)
    for a, b in zip(one, many, strict=True):
        assert a.logprob == pytest.approx(b.logprob, abs=1e-5)


def rolling_by_hand(scorer: GPTScorer, text: str, stride: int) -> float:
    """Every token scored once: the first CONTEXT tokens from <|endoftext|> + the text; each
    later chunk of `stride` tokens by the CONTEXT tokens that precede its last token."""
    tokens = scorer.tokenizer.encode(text, add_special_tokens=False).ids
    padded = [scorer.eot_id, *tokens]
    total, position = 0.0, 0
    while position < len(tokens):
        end = min(len(tokens), CONTEXT if position == 0 else position + stride)
        inputs = padded[max(0, end - CONTEXT):end]
        log_probs = log_softmax_of(scorer, inputs)[-(end - position):]
        total += log_probs.gather(1, torch.tensor(tokens[position:end])[:, None]).sum().item()
        position = end
    return total


def test_rolling_with_stride_equal_to_the_context_is_disjoint_windows(scorer):
    texts = [book_paragraphs(8000)[12], "Short text.", ""]
    results = scorer.loglikelihood_rolling([RollingRequest(i, t) for i, t in enumerate(texts)])
    num_tokens = [len(scorer.tokenizer.encode(t).ids) for t in texts]
    assert num_tokens[0] > 3 * CONTEXT  # several windows and a partial last one
    assert [r.num_tokens for r in results] == num_tokens
    for text, result in zip(texts, results, strict=True):
        assert result.logprob == pytest.approx(rolling_by_hand(scorer, text, CONTEXT), abs=1e-3)
    assert results[2].logprob == 0.0


def test_rolling_with_a_smaller_stride_scores_every_token_once_with_more_context(scorer):
    text = book_paragraphs(8000)[13]
    [strided] = scorer.loglikelihood_rolling([RollingRequest(0, text)], stride=8)
    assert strided.logprob == pytest.approx(rolling_by_hand(scorer, text, 8), abs=1e-3)
    [disjoint] = scorer.loglikelihood_rolling([RollingRequest(0, text)])
    assert strided.num_tokens == disjoint.num_tokens
    assert strided.logprob != pytest.approx(disjoint.logprob, abs=1e-3)
    with pytest.raises(ValueError, match="stride"):
        scorer.loglikelihood_rolling([RollingRequest(0, text)], stride=CONTEXT + 1)


def test_generation_is_greedy_and_stops_at_the_first_stop_string(scorer):
    contexts = ["The old house stood on the hill", "It was", "The old house stood on the hill"]
    free = scorer.generate([GenerationRequest(0, contexts[0], until=(), max_new_tokens=10)])[0]
    assert free.text == greedy_text(scorer, contexts[0], 10) and not free.truncated
    stop = free.text[len(free.text) // 2:][:2]  # a stop string from inside the greedy text
    results = scorer.generate([GenerationRequest(i, c, until=(stop,), max_new_tokens=10)
                               for i, c in enumerate(contexts)])
    assert results[0].text == free.text.split(stop)[0] == results[2].text
    assert results[1].text == greedy_text(scorer, contexts[1], 10).split(stop)[0]
    long_prompt = book_paragraphs(8000)[13]
    assert scorer.generate([GenerationRequest(0, long_prompt, max_new_tokens=4)])[0].truncated
    with pytest.raises(ValueError, match="max_new_tokens"):
        scorer.generate([GenerationRequest(0, "x", max_new_tokens=CONTEXT)])


def test_a_continuation_without_tokens_is_an_error_naming_the_example(scorer):
    with pytest.raises(ValueError, match="example 7 choice 1"):
        scorer.loglikelihood([LoglikelihoodRequest(7, 1, "context", "")])
