"""Requests -> token ids, and generated text -> answers, the way lm-evaluation-harness 0.4
does it, so that the same request scores the same tokens here and there.

    pairs = encode_pairs(tokenizer, [("The cat sat on the ", "mat")], prefix_id=eot)
    # -> [(ids of "The cat sat on the", ids of " mat")]

lm-eval's `_encode_pair`: trailing whitespace of the context moves to the front of the
continuation; the continuation's tokens are those of tok(context + continuation) after
the first len(tok(context)) (not a separate tok(continuation): a word split differently
at the boundary would otherwise be scored as other tokens than the model reads). An
empty context becomes `[prefix_id]`, unless the continuation itself starts with that
token, which then serves as the context (lm-eval's `loglikelihood`); so does a context of
only whitespace (lm-eval fails on it). Encoders (BERT, T5)
pass prefix_id=None: their input has its own start ([CLS], the sentinel).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from tokenizers import Tokenizer

from stages.evaluate.requests import LoglikelihoodRequest, LoglikelihoodResult

# A scorer's log-likelihood of (request, (context ids, continuation ids)) pairs.
ScorePairs = Callable[[list[LoglikelihoodRequest], list[tuple[list[int], list[int]]]], list[LoglikelihoodResult]]


def split_trailing_whitespace(context: str, continuation: str) -> tuple[str, str]:
    """("Q: a ", "b") -> ("Q: a", " b")."""
    stripped = context.rstrip()
    return stripped, context[len(stripped):] + continuation


def encode_texts(tokenizer: Tokenizer, texts: Sequence[str]) -> list[list[int]]:
    """Token ids of each text, without the tokenizer's template ([CLS], </s>, ...)."""
    if not texts:
        return []
    return [encoding.ids for encoding in tokenizer.encode_batch_fast(list(texts), add_special_tokens=False)]


def encode_pairs(tokenizer: Tokenizer, pairs: Sequence[tuple[str, str]],
                 prefix_id: int | None) -> list[tuple[list[int], list[int]]]:
    """(context ids, continuation ids) for each (context, continuation)."""
    split = [split_trailing_whitespace(context, continuation) if context else (context, continuation)
             for context, continuation in pairs]
    contexts = encode_texts(tokenizer, [context for context, _ in split])
    wholes = encode_texts(tokenizer, [context + continuation for context, continuation in split])
    encoded = []
    for context_ids, whole_ids in zip(contexts, wholes, strict=True):
        if context_ids:
            encoded.append((context_ids, whole_ids[len(context_ids):]))
        elif prefix_id is not None and whole_ids[:1] != [prefix_id]:
            encoded.append(([prefix_id], whole_ids))
        else:  # the continuation starts with the prefix token (or an encoder needs none)
            cut = 0 if prefix_id is None else 1
            encoded.append((whole_ids[:cut], whole_ids[cut:]))
    return encoded


def score_fitting(requests: list[LoglikelihoodRequest], pairs: list[tuple[list[int], list[int]]],
                  max_tokens: int, score: ScorePairs) -> list[LoglikelihoodResult]:
    """`score(requests, pairs)` for the requests whose continuation fits in `max_tokens`;
    the others get `LoglikelihoodResult.unscored` (their example is left out of the task's
    score and counted). An empty continuation is a task error and raises."""
    fitting = []
    for index, (request, (_, continuation)) in enumerate(zip(requests, pairs, strict=True)):
        if not continuation:
            raise ValueError(f"example {request.example} choice {request.choice}: the continuation "
                             f"{request.continuation!r} has no tokens to score; check the task's targets")
        if len(continuation) <= max_tokens:
            fitting.append(index)
    if len(fitting) == len(requests):
        return score(requests, pairs)
    results = [LoglikelihoodResult.unscored(len(continuation)) for _, continuation in pairs]
    if fitting:
        scored = score([requests[i] for i in fitting], [pairs[i] for i in fitting])
        for index, result in zip(fitting, scored, strict=True):
            results[index] = result
    return results


def cut_at_stops(text: str, until: Sequence[str]) -> str:
    """The text before the first occurrence of any stop string (lm-eval's post-processing)."""
    for stop in until:
        if stop:
            text = text.split(stop)[0]
    return text
