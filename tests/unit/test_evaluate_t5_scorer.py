"""The T5 scorer's sentinel-span format against a hand-built teacher-forced forward pass:
encoder = context <extra_id_0> </s>, decoder = <pad> <extra_id_0> continuation, only the
continuation's tokens scored; truncation; rolling chunks; greedy span generation."""

from __future__ import annotations

import pytest
import torch

from stages.evaluate.requests import GenerationRequest, LoglikelihoodRequest, RollingRequest
from stages.evaluate.scorers import T5Scorer, load_scorer
from stages.models.generation import generate_seq2seq
from tests.support.pretrained_dirs import book_paragraphs, write_pretrained

MAX_LENGTH = 24
ARCHITECTURE = {"num_layers": 2, "hidden_size": 64, "num_heads": 2, "head_size": 16, "ff_size": 128}


@pytest.fixture(scope="module")
def scorer(tmp_path_factory) -> T5Scorer:
    root = write_pretrained(tmp_path_factory.mktemp("t5"), "t5", ARCHITECTURE, vocab_size=1024, max_seq_len=None)
    return load_scorer(root / "model", batch_size=3, max_length=MAX_LENGTH)


def ids(scorer: T5Scorer, *names: str) -> list[int]:
    return [scorer.tokenizer.token_to_id(name) for name in names]


def span_log_probs(scorer: T5Scorer, source: list[int], span: list[int]) -> torch.Tensor:
    """(len(span), V): log-distributions of the span's tokens, teacher-forced after <extra_id_0>."""
    sentinel, = ids(scorer, "<extra_id_0>")
    with torch.no_grad():
        logits, _ = scorer.model(torch.tensor([source]), labels=torch.tensor([[sentinel, *span]]))
    return logits[0, 1:].float().log_softmax(-1)


def by_hand(scorer: T5Scorer, context: str, continuation: str) -> tuple[float, bool]:
    encode = scorer.tokenizer.encode
    spaces = context[len(context.rstrip()):]
    context, continuation = context.rstrip(), spaces + continuation
    context_ids = encode(context, add_special_tokens=False).ids
    span = encode(context + continuation, add_special_tokens=False).ids[len(context_ids):]
    source = context_ids[-(MAX_LENGTH - 2):] + ids(scorer, "<extra_id_0>", "</s>")
    log_probs = span_log_probs(scorer, source, span)
    targets = torch.tensor(span)
    return log_probs.gather(1, targets[:, None]).sum().item(), bool((log_probs.argmax(-1) == targets).all())


def test_a_continuation_is_scored_as_the_first_sentinel_span(scorer):
    long_context = book_paragraphs(8000)[12]
    requests = [LoglikelihoodRequest(0, 0, "The dog barked at the", " moon"),
                LoglikelihoodRequest(0, 1, "The dog barked at the", " old farmer all night"),
                LoglikelihoodRequest(1, 0, "", "Whateley"),
                LoglikelihoodRequest(2, 0, "He went up the ", "hill"),
                LoglikelihoodRequest(3, 0, long_context, " in the end")]
    results = scorer.loglikelihood(requests)
    for request, result in zip(requests, results, strict=True):
        expected, expected_greedy = by_hand(scorer, request.context, request.continuation)
        assert result.logprob == pytest.approx(expected, abs=1e-4), request
        assert result.is_greedy == expected_greedy
    assert [r.truncated for r in results] == [False, False, False, False, True]
    assert results[0].num_tokens == len(scorer.tokenizer.encode("The dog barked at the moon").ids) - len(
        scorer.tokenizer.encode("The dog barked at the").ids)


def test_is_greedy_when_the_span_is_the_models_own_argmax(scorer):
    # A context whose argmax span token is a word piece ("▁word"), so that " word" after
    # the context tokenizes back to that one id.
    words = book_paragraphs(8000)[12].split()
    for end in range(3, 60):
        context = " ".join(words[:end])
        source = scorer.tokenizer.encode(context, add_special_tokens=False).ids[-(MAX_LENGTH - 2):]
        token = int(span_log_probs(scorer, source + ids(scorer, "<extra_id_0>", "</s>"), [0])[0].argmax())
        piece = scorer.tokenizer.id_to_token(token)
        if piece.startswith("▁") and len(piece) > 1 and piece[1:].isalpha():
            break
    else:
        pytest.fail("no context in the paragraph has a word as the random model's argmax")
    results = scorer.loglikelihood([LoglikelihoodRequest(0, 0, context, " " + piece[1:]),
                                    LoglikelihoodRequest(0, 1, context, " " + piece[1:] + "zq")])
    assert results[0].num_tokens == 1 and results[0].is_greedy
    assert not results[1].is_greedy


def rolling_by_hand(scorer: T5Scorer, tokens: list[int], stride: int) -> float:
    total = 0.0
    for start in range(0, len(tokens), stride):
        chunk = tokens[start:start + stride]
        source = tokens[max(0, start - (MAX_LENGTH - 2)):start] + ids(scorer, "<extra_id_0>", "</s>")
        total += span_log_probs(scorer, source, chunk).gather(1, torch.tensor(chunk)[:, None]).sum().item()
    return total


def test_rolling_scores_chunks_after_the_preceding_tokens(scorer):
    text = book_paragraphs(8000)[13]
    tokens = scorer.tokenizer.encode(text, add_special_tokens=False).ids
    [strided] = scorer.loglikelihood_rolling([RollingRequest(0, text)], stride=8)
    assert strided.num_tokens == len(tokens) > 3 * MAX_LENGTH
    assert strided.logprob == pytest.approx(rolling_by_hand(scorer, tokens, 8), abs=1e-3)
    [default] = scorer.loglikelihood_rolling([RollingRequest(0, text)])  # chunks of max_length // 4
    assert default.logprob == pytest.approx(rolling_by_hand(scorer, tokens, MAX_LENGTH // 4), abs=1e-3)


def test_generation_decodes_the_span_and_cuts_at_stops(scorer):
    context = "The dog barked at the"
    source = scorer.tokenizer.encode(context, add_special_tokens=False).ids + ids(scorer, "<extra_id_0>", "</s>")
    output = generate_seq2seq(scorer.model, torch.tensor([source]), None, 7, eos_token_id=scorer.model.config.eos_token_id)
    decoded = output[0, 1:].tolist()
    if decoded[:1] == ids(scorer, "<extra_id_0>"):
        decoded = decoded[1:]
    stops = {scorer.tokenizer.token_to_id(f"<extra_id_{i}>") for i in range(100)} | {scorer.model.config.eos_token_id}
    span = next((decoded[:i] for i, t in enumerate(decoded) if t in stops), decoded)[:6]
    [result] = scorer.generate([GenerationRequest(0, context, until=(), max_new_tokens=6)])
    assert result.text == scorer.tokenizer.decode(span) and not result.truncated
    if len(result.text) > 2:
        stop = result.text[1:3]
        [cut] = scorer.generate([GenerationRequest(0, context, until=(stop,), max_new_tokens=6)])
        assert cut.text == result.text.split(stop)[0]
