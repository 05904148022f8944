"""Scores requests with a GPT (decoder-only) model, as lm-evaluation-harness's HFLM does.

    scorer = GPTScorer(model, tokenizer, eot_id=0, batch_size=32)
    scorer.loglikelihood([LoglikelihoodRequest(0, 0, "The cat sat on the", " mat")])

loglikelihood: the model reads (context + continuation)[-(max_length + 1):][:-1] (cut
from the left when too long) and the last len(continuation) positions predict the
continuation. Rolling: see windows.py. Generation: greedy, KV-cached, until a stop string
or the end-of-text token.

Where the time goes and what is saved: the choices of one example read their shared
context once (shared_prefix.py; lm-eval's "one-token continuation" cache is the case of
one-token choices), in rows of at most max_length tokens; equal rows run once; rows are sorted by length so that padding is
small, and padded on the right so that plain rows need no mask beyond the causal one;
the vocabulary projection and log-softmax run only at the continuation's positions
(lm-eval projects and log-softmaxes every position of every row).
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
from stages.evaluate.scorers.shared_prefix import SharedPrefixRow, causal_row, shared_prefix_mask, shared_prefix_row
from stages.evaluate.scorers.token_scores import sum_by_request
from stages.evaluate.scorers.windows import check_stride, score_chunks
from stages.models.gpt.model import GPT

# What one request scores: (row index, the row positions whose logits predict the targets, targets).
Item = tuple[int, list[int], Sequence[int]]


class GPTScorer:
    family = "gpt"

    def __init__(self, model: GPT, tokenizer: Tokenizer, *, eot_id: int, batch_size: int = 32,
                 device: str | torch.device = "cpu", max_length: int | None = None):
        self.model = model.to(device).float().eval()
        self.tokenizer = tokenizer
        self.eot_id = eot_id  # the empty context, the first rolling window's context, a stop
        self.batch_size = batch_size
        self.device = device
        self.max_length = max_length or model.config.max_seq_len

    def loglikelihood(self, requests: list[LoglikelihoodRequest]) -> list[LoglikelihoodResult]:
        pairs = encode_pairs(self.tokenizer, [(r.context, r.continuation) for r in requests], self.eot_id)
        return score_fitting(requests, pairs, self.max_length, self._loglikelihood)

    def _loglikelihood(self, requests: list[LoglikelihoodRequest], pairs: list[tuple[list[int], list[int]]]
                       ) -> list[LoglikelihoodResult]:
        rows, items = self.plan_rows(requests, pairs)
        logprobs, greedy = self._score(rows.rows, items)
        return [LoglikelihoodResult(logprob, is_greedy, len(continuation),
                                    truncated=len(context) + len(continuation) > self.max_length + 1)
                for logprob, is_greedy, (context, continuation) in zip(logprobs, greedy, pairs, strict=True)]

    def plan_rows(self, requests: list[LoglikelihoodRequest], pairs: list[tuple[list[int], list[int]]]
                  ) -> tuple[RowSet, list[Item]]:
        """The model input rows of the requests' (context ids, continuation ids), and what
        each request reads from them. The choices of one example share its context's rows,
        up to max_length tokens a row. Not across examples: with an empty or constant
        context a whole task would share one row (69,174 tokens for 1,267 examples, and a
        mask of its square), and rows of many examples' choices packed up to max_length
        spend most of their attention on positions the mask then hides."""
        rows = RowSet()
        items: list[Item] = [None] * len(pairs)  # type: ignore[list-item]
        groups: dict[tuple[int, tuple[int, ...]], list[int]] = {}
        for index, (request, (context, continuation)) in enumerate(zip(requests, pairs, strict=True)):
            if len(context) + len(continuation) > self.max_length + 1:  # cut from the left: a row of its own
                items[index] = rows.causal_item((context + continuation)[-(self.max_length + 1):-1], continuation)
            else:
                groups.setdefault((request.example, tuple(context)), []).append(index)
        for (_, context), members in groups.items():
            shared = rows.shared_context_items(context, [pairs[m][1] for m in members], self.max_length)
            for member, item in zip(members, shared, strict=True):
                items[member] = item
        return rows, items

    def loglikelihood_rolling(self, requests: list[RollingRequest], stride: int | None = None
                              ) -> list[RollingResult]:
        stride = check_stride(stride, self.max_length, self.family)
        documents = encode_texts(self.tokenizer, [r.text for r in requests])
        rows, items, owners = RowSet(), [], []
        for index, tokens in enumerate(documents):
            inputs = [self.eot_id, *tokens]  # inputs[i] predicts tokens[i]
            for start, end in score_chunks(len(tokens), self.max_length, stride):
                items.append(rows.causal_item(inputs[max(0, end - self.max_length):end], tokens[start:end]))
                owners.append(index)
        logprobs, _ = self._score(rows.rows, items)
        totals = [0.0] * len(requests)
        for owner, logprob in zip(owners, logprobs, strict=True):
            totals[owner] += logprob
        return [RollingResult(total, len(tokens)) for total, tokens in zip(totals, documents, strict=True)]

    def generate(self, requests: list[GenerationRequest]) -> list[GenerationResult]:
        prompts, truncated = [], []
        for request, ids in zip(requests, encode_texts(self.tokenizer, [r.context for r in requests]), strict=True):
            room = self.max_length - request.max_new_tokens
            if room < 1:
                raise ValueError(
                    f"example {request.example}: max_new_tokens={request.max_new_tokens} leaves no room "
                    f"for the prompt in this model's context of {self.max_length} tokens; lower it")
            ids = ids or [self.eot_id]
            prompts.append(ids[-room:])
            truncated.append(len(ids) > room)
        # Same-length prompts batch without padding (the KV cache takes no padding mask).
        groups: dict[tuple[int, int], list[int]] = {}
        for index, (request, prompt) in enumerate(zip(requests, prompts, strict=True)):
            groups.setdefault((len(prompt), request.max_new_tokens), []).append(index)
        texts: list[str] = [""] * len(requests)
        for members in groups.values():
            for start in range(0, len(members), self.batch_size):
                batch = members[start:start + self.batch_size]
                generated = self._greedy([prompts[i] for i in batch], requests[batch[0]].max_new_tokens,
                                         [requests[i].until for i in batch])
                for index, text in zip(batch, generated, strict=True):
                    texts[index] = text
        return [GenerationResult(text, cut) for text, cut in zip(texts, truncated, strict=True)]

    @torch.inference_mode()
    def _greedy(self, prompts: list[list[int]], max_new_tokens: int, stops: list[tuple[str, ...]]) -> list[str]:
        """Greedy continuations of same-length prompts, each cut before its first stop string."""
        cache = self.model.new_kv_cache()
        step = torch.tensor(prompts, dtype=torch.long, device=self.device)  # (B, T)
        generated: list[list[int]] = [[] for _ in prompts]
        done = [False] * len(prompts)
        for _ in range(max_new_tokens):
            hidden = self.model.hidden_states(step, kv_cache=cache)[:, -1]  # (B, C)
            tokens = self.model.lm_head(hidden).argmax(dim=-1)  # (B,)
            for row, token in enumerate(tokens.tolist()):
                if done[row]:
                    continue
                if token == self.eot_id:
                    done[row] = True
                    continue
                generated[row].append(token)
                text = self.tokenizer.decode(generated[row])
                done[row] = any(stop and stop in text for stop in stops[row])
            if all(done):
                break
            step = tokens[:, None]  # (B, 1)
        return [cut_at_stops(self.tokenizer.decode(ids), until) for ids, until in zip(generated, stops, strict=True)]

    @torch.inference_mode()
    def _score(self, rows: list[SharedPrefixRow], items: list[Item]) -> tuple[list[float], list[bool]]:
        """(summed log-prob of its targets, every target the argmax) per item."""
        users: list[list[int]] = [[] for _ in rows]
        for item, (row, _, _) in enumerate(items):
            users[row].append(item)
        logprobs, greedy = [0.0] * len(items), [False] * len(items)
        for batch in length_batches([len(row.tokens) for row in rows], self.batch_size):
            hidden = self._hidden_states([rows[i] for i in batch])  # (B, T, C)
            width = hidden.size(1)
            positions, targets, segments, scored = [], [], [], []
            for b, row in enumerate(batch):
                for item in users[row]:
                    _, predictors, item_targets = items[item]
                    positions.extend(b * width + p for p in predictors)
                    targets.extend(item_targets)
                    segments.extend([len(scored)] * len(item_targets))
                    scored.append(item)
            picked = hidden.reshape(-1, hidden.size(-1))[torch.tensor(positions, device=self.device)]  # (N, C)
            sums, all_greedy = sum_by_request(
                picked, torch.tensor(targets, device=self.device), torch.tensor(segments, device=self.device),
                len(scored), project=self.model.lm_head)
            for item, logprob, is_greedy in zip(scored, sums, all_greedy, strict=True):
                logprobs[item], greedy[item] = logprob, is_greedy
        return logprobs, greedy

    def _hidden_states(self, rows: list[SharedPrefixRow]) -> torch.Tensor:
        """Final hidden states (B, T, C) of rows padded on the right. Plain causal rows go
        through the model's own forward (the causal mask hides right padding); rows with
        branches need their position ids and the shared-prefix mask."""
        ids, _ = pad_right([row.tokens for row in rows], 0, self.device)  # (B, T)
        if not any(row.has_branches for row in rows):
            return self.model.hidden_states(ids)
        positions, _ = pad_right([row.positions for row in rows], 0, self.device)  # (B, T)
        segments, _ = pad_right([row.segments for row in rows], -1, self.device)  # (B, T)
        mask = shared_prefix_mask(segments)  # (B, 1, T, T)
        # Learned (GPT-2) or rotary (llama) positions alike: each branch restarts its own.
        return self.model.hidden_states_at(ids, positions, mask)  # (B, T, C)


class RowSet:
    """Model input rows, each stored once (equal rows: one forward pass)."""

    def __init__(self) -> None:
        self.rows: list[SharedPrefixRow] = []
        self._index: dict[tuple[tuple[int, ...], tuple[int, ...]], int] = {}

    def add(self, row: SharedPrefixRow) -> int:
        key = (tuple(row.tokens), tuple(row.segments))
        if key not in self._index:
            self._index[key] = len(self.rows)
            self.rows.append(row)
        return self._index[key]

    def causal_item(self, inputs: Sequence[int], targets: Sequence[int]) -> Item:
        """A plain causal row whose last len(targets) positions predict targets."""
        row = self.add(causal_row(inputs))
        return row, list(range(len(inputs) - len(targets), len(inputs))), targets

    def shared_context_items(self, context: Sequence[int], continuations: list[Sequence[int]],
                             max_tokens: int) -> list[Item]:
        """Items for continuations of one context: rows of the context and one branch per
        distinct continuation, as many branches as fit in max_tokens; a row of one branch
        is a plain causal row."""
        distinct = list(dict.fromkeys(tuple(c) for c in continuations))  # equal ones share a branch
        item_of: dict[tuple[int, ...], Item] = {}
        for group in pack_branches(len(context), distinct, max_tokens):
            if len(group) == 1:
                item_of[group[0]] = self.causal_item([*context, *group[0][:-1]], group[0])
                continue
            row, predictors = shared_prefix_row(context, group)
            row_index = self.add(row)
            for continuation, positions in zip(group, predictors, strict=True):
                item_of[continuation] = (row_index, positions, continuation)
        return [item_of[tuple(c)] for c in continuations]


def pack_branches(context_length: int, continuations: list[tuple[int, ...]], max_tokens: int
                  ) -> list[list[tuple[int, ...]]]:
    """Consecutive groups of continuations whose row (the context, then each continuation
    but its last token) holds at most max_tokens; a continuation too long to share a row
    gets one of its own (the caller made sure it fits alone)."""
    groups: list[list[tuple[int, ...]]] = []
    size = max_tokens + 1  # no open group
    for continuation in continuations:
        branch = len(continuation) - 1
        if size + branch > max_tokens:
            groups.append([])
            size = context_length
        groups[-1].append(continuation)
        size += branch
    return groups
