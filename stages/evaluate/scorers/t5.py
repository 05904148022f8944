"""Scores requests with a T5 (encoder-decoder) model in the span-corruption format it was
pretrained on: the continuation is the text of a masked span at the end of the context.

    encoder  context tokens  <extra_id_0>  </s>          (the context cut from the left to fit)
    decoder  <pad>  <extra_id_0>  c1 ... c(n-1)          (teacher forcing)
    scored   log P(c1 ... cn), the n continuation tokens; not the sentinel, not what follows

This is how a pretraining target begins ("<extra_id_0> span <extra_id_1> ..."), so cloze
(LAMBADA's last word) is exactly the pretraining task, and a multiple-choice ending is a
span to fill. Context and continuation are tokenized together and split (encoding.py),
as a span is carved out of one tokenized text in pretraining.

Rolling log-likelihood: the document is cut into chunks of `stride` tokens (default
max_length // 4, about T5's targets length for its inputs: 114 for 512). Each chunk is
the span after the `max_length - 2` tokens before it:

    encoder  t[s - (max_length - 2) : s]  <extra_id_0>  </s>
    decoder  <pad>  <extra_id_0>  t[s : e - 1]            scored: t[s : e]

so every token is scored once, with the encoder reading up to max_length - 2 earlier
tokens and the decoder the earlier tokens of its chunk. The first chunk's encoder reads
only the sentinel. These numbers measure the model; they are not comparable with a
decoder-only model's perplexity (lm-eval's seq2seq rolling feeds the encoder a single
end-of-text token and the whole window to the decoder instead).

Generation: greedy decoding of the sentinel span (`generate_seq2seq`), cut at the next
sentinel or </s>, then before the first stop string.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from tokenizers import Tokenizer

from stages.evaluate.requests import (
    GenerationRequest,
    GenerationResult,
    LoglikelihoodRequest,
    LoglikelihoodResult,
    RollingRequest,
    RollingResult,
)
from stages.evaluate.scorers.batching import length_batches, pad_right
from stages.evaluate.scorers.encoding import cut_at_stops, encode_pairs, encode_texts, score_fitting
from stages.evaluate.scorers.token_scores import sum_by_request
from stages.evaluate.scorers.windows import check_stride, score_chunks
from stages.models.generation import generate_seq2seq
from stages.models.t5.model import T5


class T5Scorer:
    family = "t5"

    def __init__(self, model: T5, tokenizer: Tokenizer, *, sentinel_ids: Sequence[int], max_length: int = 512,
                 batch_size: int = 32, device: str | torch.device = "cpu"):
        if max_length < 3:
            raise ValueError(f"max_length={max_length}: the t5 encoder needs room for the context, "
                             "<extra_id_0> and </s>; use at least 3")
        self.model = model.to(device).float().eval()
        self.tokenizer = tokenizer
        self.span_id = sentinel_ids[0]  # <extra_id_0>: the span to fill
        self.stop_ids = set(sentinel_ids) | {model.config.eos_token_id}  # the span ends at either
        self.batch_size = batch_size
        self.device = device
        self.max_length = max_length
        self.context_room = max_length - 2  # the sentinel and </s> follow the context

    def loglikelihood(self, requests: list[LoglikelihoodRequest]) -> list[LoglikelihoodResult]:
        pairs = encode_pairs(self.tokenizer, [(r.context, r.continuation) for r in requests], prefix_id=None)
        return score_fitting(requests, pairs, self.max_length, self._loglikelihood)

    def _loglikelihood(self, requests: list[LoglikelihoodRequest], pairs: list[tuple[list[int], list[int]]]
                       ) -> list[LoglikelihoodResult]:
        logprobs, greedy = self._score_spans([(self._encoder_input(context), continuation)
                                              for context, continuation in pairs])
        return [LoglikelihoodResult(logprob, is_greedy, len(continuation), len(context) > self.context_room)
                for logprob, is_greedy, (context, continuation) in zip(logprobs, greedy, pairs, strict=True)]

    def loglikelihood_rolling(self, requests: list[RollingRequest], stride: int | None = None
                              ) -> list[RollingResult]:
        stride = check_stride(stride, self.max_length, self.family) if stride is not None else self.max_length // 4
        documents = encode_texts(self.tokenizer, [r.text for r in requests])
        spans, owners = [], []
        for index, tokens in enumerate(documents):
            for start, end in score_chunks(len(tokens), stride, stride):
                spans.append((self._encoder_input(tokens[:start]), tokens[start:end]))
                owners.append(index)
        logprobs, _ = self._score_spans(spans)
        totals = [0.0] * len(requests)
        for owner, logprob in zip(owners, logprobs, strict=True):
            totals[owner] += logprob
        return [RollingResult(total, len(tokens)) for total, tokens in zip(totals, documents, strict=True)]

    @torch.inference_mode()
    def generate(self, requests: list[GenerationRequest]) -> list[GenerationResult]:
        contexts = encode_texts(self.tokenizer, [r.context for r in requests])
        sources = [self._encoder_input(context) for context in contexts]
        texts = [""] * len(requests)
        by_length: dict[int, list[int]] = {}
        for index, request in enumerate(requests):
            by_length.setdefault(request.max_new_tokens, []).append(index)
        for max_new_tokens, members in by_length.items():
            for batch in length_batches([len(sources[i]) for i in members], self.batch_size):
                indices = [members[i] for i in batch]
                ids, mask = pad_right([sources[i] for i in indices], self.model.config.pad_token_id, self.device)
                # +1: the decoder first writes <extra_id_0>, then the span.
                outputs = generate_seq2seq(self.model, ids, mask, max_new_tokens + 1,
                                           eos_token_id=self.model.config.eos_token_id)
                for index, output in zip(indices, outputs.tolist(), strict=True):
                    span = self._span_of(output[1:])[:max_new_tokens]
                    texts[index] = cut_at_stops(self.tokenizer.decode(span), requests[index].until)
        return [GenerationResult(text, len(context) > self.context_room)
                for text, context in zip(texts, contexts, strict=True)]

    def _encoder_input(self, context: Sequence[int]) -> list[int]:
        kept = list(context[max(0, len(context) - self.context_room):])
        return kept + [self.span_id, self.model.config.eos_token_id]

    def _span_of(self, decoded: list[int]) -> list[int]:
        """The tokens of the first span: after a leading <extra_id_0>, before the next
        sentinel or </s>."""
        if decoded[:1] == [self.span_id]:
            decoded = decoded[1:]
        for position, token in enumerate(decoded):
            if token in self.stop_ids:
                return decoded[:position]
        return decoded

    @torch.inference_mode()
    def _score_spans(self, spans: list[tuple[list[int], Sequence[int]]]) -> tuple[list[float], list[bool]]:
        """(summed log-prob of the targets, all argmax) per (encoder input, targets). The
        encoder runs once per distinct input (the choices of one example share it)."""
        unique: dict[tuple[int, ...], int] = {}
        source_of = [unique.setdefault(tuple(source), len(unique)) for source, _ in spans]
        sources = list(unique)
        users: list[list[int]] = [[] for _ in sources]
        for span, source in enumerate(source_of):
            users[source].append(span)
        config = self.model.config
        logprobs, greedy = [0.0] * len(spans), [False] * len(spans)
        for batch in length_batches([len(source) for source in sources], self.batch_size):
            ids, mask = pad_right([sources[i] for i in batch], config.pad_token_id, self.device)  # (U, S)
            memory = self.model.encode(ids, mask)  # (U, S, C)
            members = [(b, span) for b, source in enumerate(batch) for span in users[source]]
            rows = torch.tensor([b for b, _ in members], device=self.device)  # (R,): which encoder output
            targets = [spans[span][1] for _, span in members]
            decoder_ids, _ = pad_right([[config.decoder_start_token_id, self.span_id, *t[:-1]] for t in targets],
                                       config.pad_token_id, self.device)  # (R, T): right padding, causal
            logits = self.model.decode(decoder_ids, memory[rows], mask[rows])  # (R, T, V)
            width = decoder_ids.size(1)
            # position 1 (after <extra_id_0>) predicts the first target token
            positions = [r * width + 1 + i for r, t in enumerate(targets) for i in range(len(t))]
            segments = [r for r, t in enumerate(targets) for _ in t]
            sums, all_greedy = sum_by_request(
                logits.reshape(-1, logits.size(-1))[torch.tensor(positions, device=self.device)],
                torch.tensor([token for t in targets for token in t], device=self.device),
                torch.tensor(segments, device=self.device), len(members))
            for (_, span), logprob, is_greedy in zip(members, sums, all_greedy, strict=True):
                logprobs[span], greedy[span] = logprob, is_greedy
        return logprobs, greedy
