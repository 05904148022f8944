"""What a task asks of a model, and what the model answers: the one interface between
task code (specs, prompts, few-shot, metrics) and scorers (GPT, T5, BERT).

    scorer = load_scorer(model_dir)                       # stages.evaluate.scorers
    results = scorer.loglikelihood([LoglikelihoodRequest(0, 0, "The cat sat on the", " mat")])
    results[0].logprob, results[0].is_greedy

Semantics follow lm-evaluation-harness, so that numbers agree with it:
- loglikelihood: log P(continuation | context), summed over the continuation's tokens.
  Trailing whitespace of the context moves to the front of the continuation before
  tokenizing; the continuation's tokens are those of tok(context + continuation) after
  the first len(tok(context)) tokens. An empty context is replaced by the model's
  begin/end-of-text token. `is_greedy`: every continuation token is the argmax. A context
  too long for the model is cut from the left (`truncated`); a continuation that alone is
  longer than the context is not scored (`too_long`; lm-eval scores a wrong slice there).
- loglikelihood_rolling: log P(text) of a whole document, scored in windows of the
  model's context length that advance by `stride` tokens (stride = context length: the
  disjoint windows lm-eval uses; smaller: every token after the first window sees at
  least context - stride tokens of left context). The first window starts with the
  end-of-text token as its context.
- generate: greedy decoding from `context` until one of `until` appears or
  `max_new_tokens`; the returned text is cut before the first stop string.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class LoglikelihoodRequest:
    example: int       # index of the example in the evaluated task
    choice: int        # index of the choice (0 where a task has a single target)
    context: str
    continuation: str


@dataclass(frozen=True)
class LoglikelihoodResult:
    logprob: float     # natural log, summed over the continuation's tokens
    is_greedy: bool
    num_tokens: int    # continuation tokens scored
    truncated: bool    # the context was cut from the left to fit
    too_long: bool = False  # the continuation alone exceeds the model's context: not scored

    @classmethod
    def unscored(cls, num_tokens: int) -> "LoglikelihoodResult":
        """The answer for a continuation longer than the model's context. Cutting it would
        score a different (shorter, so likelier) choice than its siblings, so it is not
        scored at all; score_task leaves its example out and counts it (num_skipped)."""
        return cls(float("nan"), False, num_tokens, truncated=True, too_long=True)


@dataclass(frozen=True)
class RollingRequest:
    example: int
    text: str


@dataclass(frozen=True)
class RollingResult:
    logprob: float     # natural log, summed over every token of the text
    num_tokens: int


@dataclass(frozen=True)
class GenerationRequest:
    example: int
    context: str
    until: tuple[str, ...] = ("\n",)
    max_new_tokens: int = 32


@dataclass(frozen=True)
class GenerationResult:
    text: str
    truncated: bool    # the context was cut from the left to fit


class Scorer(Protocol):
    """A model that answers requests. Requests are answered in the order given; scorers
    batch internally (sorted by length, results put back in order)."""

    family: str        # "gpt", "bert", "t5"
    max_length: int    # the model's context length in tokens

    def loglikelihood(self, requests: list[LoglikelihoodRequest]) -> list[LoglikelihoodResult]: ...

    def loglikelihood_rolling(self, requests: list[RollingRequest], stride: int | None = None
                              ) -> list[RollingResult]: ...

    def generate(self, requests: list[GenerationRequest]) -> list[GenerationResult]: ...
