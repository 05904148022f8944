"""The choices of one example share model rows, but examples do not, and no row grows
past the model's context: an empty (or constant) context is shared by every example of a
task, and used to make the whole task one row (69,174 tokens for 1,267 examples, and a
mask of its square: 21 GB before Ray's memory monitor killed the worker). Scores stay
those of scoring each request alone."""

from __future__ import annotations

import pytest

from stages.evaluate.requests import LoglikelihoodRequest
from stages.evaluate.scorers import load_scorer
from stages.evaluate.scorers.encoding import encode_pairs
from stages.evaluate.scorers.gpt import pack_branches
from stages.evaluate.scorers.token_scores import sum_by_request
from tests.support.pretrained_dirs import book_paragraphs, write_pretrained

CONTEXT = 32


@pytest.fixture(scope="module")
def scorer(tmp_path_factory):
    root = write_pretrained(tmp_path_factory.mktemp("bounded_rows"), "gpt",
                            {"num_layers": 2, "hidden_size": 64, "num_heads": 2},
                            vocab_size=512, max_seq_len=CONTEXT)
    return load_scorer(root / "model", batch_size=8)


def blimp_style_requests() -> list[LoglikelihoodRequest]:
    """60 examples of two whole sentences each, after an empty context (BLiMP's form)."""
    words = [word for word in " ".join(book_paragraphs(6_000)).split() if word.isalpha()]
    requests = []
    for example in range(60):
        sentence = words[example * 5:example * 5 + 2 + example % 4]
        swapped = [sentence[1], sentence[0], *sentence[2:]]
        requests += [LoglikelihoodRequest(example, 0, "", " " + " ".join(sentence)),
                     LoglikelihoodRequest(example, 1, "", " " + " ".join(swapped))]
    return requests


def test_an_empty_context_task_scores_as_unmerged_in_rows_no_longer_than_the_context(scorer):
    requests = blimp_style_requests()
    pairs = encode_pairs(scorer.tokenizer, [(r.context, r.continuation) for r in requests], scorer.eot_id)
    rows, _ = scorer.plan_rows(requests, pairs)
    lengths = [len(row.tokens) for row in rows.rows]
    assert max(lengths) <= CONTEXT, lengths
    # one row per example, two where its choices do not fit in one
    assert 60 <= len(rows.rows) < len(requests) and any(row.has_branches for row in rows.rows)

    merged = scorer.loglikelihood(requests)
    alone = [scorer.loglikelihood([request])[0] for request in requests]
    for request, mine, single in zip(requests, merged, alone, strict=True):
        assert abs(mine.logprob - single.logprob) < 1e-4, (request, mine.logprob, single.logprob)
        assert mine.is_greedy == single.is_greedy and mine.num_tokens == single.num_tokens


def test_an_example_of_many_choices_is_split_into_rows_no_longer_than_the_context(scorer):
    words = [word for word in " ".join(book_paragraphs(2_000)).split() if word.isalpha()]
    requests = [LoglikelihoodRequest(0, i, "Which words come next?", " " + " ".join(words[i * 3:i * 3 + 3]))
                for i in range(20)]
    pairs = encode_pairs(scorer.tokenizer, [(r.context, r.continuation) for r in requests], scorer.eot_id)
    rows, _ = scorer.plan_rows(requests, pairs)
    assert len(rows.rows) > 1 and max(len(row.tokens) for row in rows.rows) <= CONTEXT
    alone = [scorer.loglikelihood([request])[0].logprob for request in requests]
    assert [r.logprob for r in scorer.loglikelihood(requests)] == pytest.approx(alone, abs=1e-4)


def test_pack_branches_fills_rows_up_to_the_cap_in_order():
    continuations = [(1, 2, 3), (4, 5), (6, 7, 8, 9), (10,), (11, 12)]
    # context of 2; branches of 2, 1, 3, 0, 1 tokens; cap 5
    assert pack_branches(2, continuations, 5) == [[(1, 2, 3), (4, 5)], [(6, 7, 8, 9), (10,)], [(11, 12)]]
    assert pack_branches(1, continuations, 100) == [continuations]


def test_logits_projected_a_chunk_of_positions_at_a_time_sum_as_all_at_once():
    torch = pytest.importorskip("torch")
    generator = torch.Generator().manual_seed(0)
    hidden, weight = torch.randn(50, 8, generator=generator), torch.randn(30, 8, generator=generator)
    targets = torch.randint(0, 30, (50,), generator=generator)
    segments = torch.arange(50) // 7  # 8 requests, the last of one position
    targets[:7] = (hidden[:7] @ weight.T).argmax(-1)  # request 0: every token the argmax
    whole = sum_by_request(hidden @ weight.T, targets, segments, 8)
    chunked = sum_by_request(hidden, targets, segments, 8, project=lambda h: h @ weight.T, chunk=4)
    assert chunked[1] == whole[1] and whole[1][0] and not all(whole[1])
    assert chunked[0] == pytest.approx(whole[0], abs=1e-9)
