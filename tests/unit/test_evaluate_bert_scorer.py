"""The BERT scorer's pseudo-log-likelihood against its definition, one masked copy of the
input at a time through the full BertForPreTraining forward: choices, cloze is_greedy,
truncation, batch-size invariance (padding), rolling windows, and the generation error."""

from __future__ import annotations

import pytest
import torch

from stages.evaluate.requests import GenerationRequest, LoglikelihoodRequest, RollingRequest
from stages.evaluate.scorers import BertScorer, GenerationNotSupported, load_scorer
from tests.support.pretrained_dirs import book_paragraphs, write_pretrained

MAX_LENGTH = 24


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    root = write_pretrained(tmp_path_factory.mktemp("bert"), "bert", {"num_layers": 2, "hidden_size": 64, "num_heads": 2},
                            vocab_size=1024, max_seq_len=MAX_LENGTH)
    return root / "model"


@pytest.fixture(scope="module")
def scorer(model_dir) -> BertScorer:
    return load_scorer(model_dir, batch_size=5)


def pll_by_hand(scorer: BertScorer, text_ids: list[int], scored: range) -> tuple[float, bool]:
    """Sum over p in scored of log P(text_ids[p] | [CLS] text_ids with p masked [SEP])."""
    total, greedy = 0.0, True
    for position in scored:
        masked = list(text_ids)
        masked[position] = scorer.mask_id
        with torch.no_grad():
            logits, _ = scorer.model(torch.tensor([[scorer.cls_id, *masked, scorer.sep_id]]))
        log_probs = logits[0, 1 + position].float().log_softmax(-1)
        total += log_probs[text_ids[position]].item()
        greedy = greedy and int(log_probs.argmax()) == text_ids[position]
    return total, greedy


def by_hand(scorer: BertScorer, context: str, continuation: str) -> tuple[float, bool]:
    encode = scorer.tokenizer.encode
    context_ids = encode(context.rstrip(), add_special_tokens=False).ids
    whole = encode(context + continuation, add_special_tokens=False).ids
    continuation_ids = whole[len(context_ids):]
    kept = context_ids[max(0, len(context_ids) - (MAX_LENGTH - 2 - len(continuation_ids))):]
    return pll_by_hand(scorer, kept + continuation_ids, range(len(kept), len(kept) + len(continuation_ids)))


def test_pseudo_log_likelihood_masks_one_continuation_token_at_a_time(scorer):
    requests = [LoglikelihoodRequest(0, 0, "the dog barked at the", " old farmer all night"),
                LoglikelihoodRequest(0, 1, "the dog barked at the", " moon"),
                LoglikelihoodRequest(1, 0, "", "whateley came home"),
                LoglikelihoodRequest(2, 0, book_paragraphs(8000)[12], " in the end")]
    results = scorer.loglikelihood(requests)
    for request, result in zip(requests, results, strict=True):
        expected, expected_greedy = by_hand(scorer, request.context, request.continuation)
        assert result.logprob == pytest.approx(expected, abs=1e-4), request
        assert result.is_greedy == expected_greedy
    assert [r.truncated for r in results] == [False, False, False, True]


def test_cloze_is_greedy_when_every_masked_token_is_the_argmax(scorer):
    words = book_paragraphs(8000)[12].lower().split()
    for end in range(3, 60):  # a context whose masked-slot argmax is a whole word
        context = " ".join(words[:end])
        ids = scorer.tokenizer.encode(context, add_special_tokens=False).ids[-(MAX_LENGTH - 3):]
        with torch.no_grad():
            logits, _ = scorer.model(torch.tensor([[scorer.cls_id, *ids, scorer.mask_id, scorer.sep_id]]))
        word = scorer.tokenizer.id_to_token(int(logits[0, -2].argmax()))
        if word.isalpha():
            break
    else:
        pytest.fail("no context in the paragraph has a word as the random model's argmax")
    results = scorer.loglikelihood([LoglikelihoodRequest(0, 0, context, " " + word),
                                    LoglikelihoodRequest(0, 1, context, " zzzz" if word != "zzzz" else " q")])
    assert results[0].num_tokens == 1 and results[0].is_greedy
    assert not results[1].is_greedy


def test_results_do_not_depend_on_batch_size(model_dir, scorer):
    paragraphs = [p.lower() for p in book_paragraphs(20000)[12:17]]
    requests = [LoglikelihoodRequest(i, 0, p[:30 + 5 * i], p[30 + 5 * i:45 + 5 * i]) for i, p in enumerate(paragraphs)]
    one = load_scorer(model_dir, batch_size=1).loglikelihood(requests)
    for a, b in zip(one, scorer.loglikelihood(requests), strict=True):
        assert a.logprob == pytest.approx(b.logprob, abs=1e-4)


def test_rolling_is_pseudo_log_likelihood_over_disjoint_windows(scorer):
    text = " ".join(book_paragraphs(8000)[13].split()[:40])
    tokens = scorer.tokenizer.encode(text, add_special_tokens=False).ids
    window = MAX_LENGTH - 2
    expected = 0.0
    for start in range(0, len(tokens), window):
        end = min(start + window, len(tokens))
        first = max(0, end - window)  # the last window reaches back to be full
        expected += pll_by_hand(scorer, tokens[first:end], range(start - first, end - first))[0]
    [result] = scorer.loglikelihood_rolling([RollingRequest(0, text)])
    assert result.num_tokens == len(tokens) > 2 * window
    assert result.logprob == pytest.approx(expected, abs=1e-3)


def test_generation_is_refused_with_the_family_named(scorer):
    with pytest.raises(GenerationNotSupported, match="bert"):
        scorer.generate([GenerationRequest(0, "the dog")])
