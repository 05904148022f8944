"""Autoregressive decoding with a KV cache.

    ids = generate(gpt, prompt_ids, max_new_tokens=20)                           # greedy
    ids = generate(gpt, prompt_ids, 20, do_sample=True, temperature=0.8, top_k=50, top_p=0.95)
    ids = generate(gpt, prompt_ids, 20, num_beams=4, eos_token_id=eos)           # beam search
    out = generate_seq2seq(t5, source_ids, attention_mask, max_new_tokens=20)    # greedy
    out = generate_seq2seq(t5, source_ids, attention_mask, 20, num_beams=4)      # beam search
    out = generate_seq2seq(t5, source_ids, attention_mask, 20, do_sample=True, top_p=0.9)

`on_token` (greedy and sampling) is called with each step's (B,) new tokens as they are
chosen, so that a caller can stream text before decoding ends (`pretrain generate`).

GPT prompts in one batch must have the same length (no padding). With the cache, each
step feeds only the newest token: keys and values of earlier positions are reused, so a
step costs O(T) instead of O(T^2). `use_cache=False` recomputes the whole prefix (the
reference the cache is tested against).

Shapes: B batch, T tokens so far, V vocabulary, K beams.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn as nn

from stages.models.gpt.model import GPT
from stages.models.t5.model import T5


def filter_logits(logits: torch.Tensor, *, top_k: int | None = None, top_p: float | None = None) -> torch.Tensor:
    """(B, V) logits with everything outside the top-k and outside the smallest set whose
    probability reaches top_p (nucleus) set to -inf. The most likely token always stays."""
    if top_k is not None and top_k < logits.size(-1):
        kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]  # (B, 1)
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p is not None and top_p < 1.0:
        sorted_logits, order = logits.sort(dim=-1, descending=True)  # (B, V)
        probs = sorted_logits.softmax(dim=-1)
        # Drop a token when the tokens ranked above it already reach top_p.
        drop_sorted = probs.cumsum(dim=-1) - probs >= top_p  # (B, V)
        drop = drop_sorted.scatter(-1, order, drop_sorted)  # back to vocabulary order
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


def next_token(logits: torch.Tensor, *, do_sample: bool, temperature: float = 1.0,
               top_k: int | None = None, top_p: float | None = None,
               generator: torch.Generator | None = None) -> torch.Tensor:
    """(B, V) last-position logits -> (B,) next token ids."""
    if not do_sample:
        return logits.argmax(dim=-1)
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0 when sampling, got {temperature}; use do_sample=False for greedy")
    logits = filter_logits(logits.float() / temperature, top_k=top_k, top_p=top_p)
    return torch.multinomial(logits.softmax(dim=-1), 1, generator=generator).squeeze(-1)


TokenCallback = Callable[[torch.Tensor], None]  # (B,) tokens just chosen


@torch.no_grad()
def generate(model: GPT, input_ids: torch.Tensor, max_new_tokens: int, *, do_sample: bool = False,
             temperature: float = 1.0, top_k: int | None = None, top_p: float | None = None,
             eos_token_id: int | None = None, use_cache: bool = True,
             generator: torch.Generator | None = None, num_beams: int = 1, length_penalty: float = 1.0,
             on_token: TokenCallback | None = None) -> torch.Tensor:
    """Prompt (B, T) -> prompt plus up to max_new_tokens tokens (B, T + n). Rows that
    produced eos_token_id keep emitting it; decoding stops when every row has.
    num_beams > 1: beam search (`_beam_search`), each row's best hypothesis, padded
    with eos_token_id."""
    if input_ids.size(1) + max_new_tokens > model.config.max_seq_len:
        raise ValueError(
            f"prompt length {input_ids.size(1)} + max_new_tokens {max_new_tokens} exceeds "
            f"max_seq_len={model.config.max_seq_len}"
        )
    if num_beams > 1:
        _check_beam_options(do_sample, on_token)
        return _gpt_beam_search(model, input_ids, max_new_tokens, num_beams, eos_token_id, length_penalty)
    cache = model.new_kv_cache() if use_cache else None
    ids, step_input = input_ids, input_ids
    done = torch.zeros(input_ids.size(0), dtype=torch.bool, device=input_ids.device)  # (B,)
    for _ in range(max_new_tokens):
        logits = model(step_input, kv_cache=cache)  # (B, T', V)
        token = next_token(logits[:, -1], do_sample=do_sample, temperature=temperature,
                           top_k=top_k, top_p=top_p, generator=generator)  # (B,)
        if eos_token_id is not None:
            token = token.masked_fill(done, eos_token_id)
            done |= token == eos_token_id
        ids = torch.cat([ids, token[:, None]], dim=1)  # (B, T+1)
        if on_token is not None:
            on_token(token)
        step_input = token[:, None] if use_cache else ids
        if done.all():
            break
    return ids


@torch.no_grad()
def generate_seq2seq(model: T5, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                     max_new_tokens: int = 20, *, num_beams: int = 1, eos_token_id: int | None = None,
                     length_penalty: float = 1.0, synced_ranks: bool = False, do_sample: bool = False,
                     temperature: float = 1.0, top_k: int | None = None, top_p: float | None = None,
                     generator: torch.Generator | None = None, on_token: TokenCallback | None = None) -> torch.Tensor:
    """Source (B, S) -> decoder output ids (B, 1 + n), starting with the decoder start
    token. Greedy for num_beams == 1 (or sampling with do_sample, as `generate`), else
    beam search returning the best hypothesis.

    synced_ranks (greedy): every rank of the default process group keeps decoding until
    all ranks' rows are finished. ZeRO-3 gathers parameters collectively in each forward,
    so a rank that stopped early would leave the others waiting forever."""
    memory = model.encode(input_ids, attention_mask)  # (B, S, C)
    B = input_ids.size(0)
    ids = torch.full((B, 1), model.config.decoder_start_token_id, dtype=torch.long, device=input_ids.device)
    if num_beams > 1:
        _check_beam_options(do_sample, on_token)
        return _seq2seq_beam_search(model, memory, attention_mask, ids, max_new_tokens, num_beams,
                                    eos_token_id, length_penalty)
    cache = model.new_kv_cache()
    done = torch.zeros(B, dtype=torch.bool, device=input_ids.device)
    for _ in range(max_new_tokens):
        logits = model.decode(ids[:, -1:], memory, attention_mask, kv_cache=cache)  # (B, 1, V)
        token = next_token(logits[:, -1], do_sample=do_sample, temperature=temperature,
                           top_k=top_k, top_p=top_p, generator=generator)  # (B,)
        if eos_token_id is not None:
            token = token.masked_fill(done, eos_token_id)
            done |= token == eos_token_id
        ids = torch.cat([ids, token[:, None]], dim=1)
        if on_token is not None:
            on_token(token)
        if _all_done(done, synced_ranks):
            break
    return ids


def _check_beam_options(do_sample: bool, on_token: TokenCallback | None) -> None:
    if do_sample:
        raise ValueError("beam search is deterministic: num_beams > 1 cannot be combined with do_sample")
    if on_token is not None:
        raise ValueError("beam search picks its tokens only at the end: on_token needs num_beams=1")


def _all_done(done: torch.Tensor, synced_ranks: bool) -> bool:
    finished = done.all()
    if synced_ranks:
        import torch.distributed as dist

        flag = finished.to(torch.int32).reshape(1)
        dist.all_reduce(flag, op=dist.ReduceOp.MIN)  # 1 only when every rank is finished
        finished = flag[0]
    return bool(finished)


def _gpt_beam_search(model: GPT, input_ids: torch.Tensor, max_new_tokens: int, num_beams: int,
                     eos_token_id: int | None, length_penalty: float) -> torch.Tensor:
    cache = model.new_kv_cache()

    def step(ids: torch.Tensor) -> torch.Tensor:  # (B*K, T) -> (B*K, V)
        fed = ids if cache[0].length == 0 else ids[:, -1:]  # the prompt once, then the newest token
        return model(fed, kv_cache=cache)[:, -1]

    def reorder(rows: torch.Tensor) -> None:
        for layer_cache in cache:
            layer_cache.reorder(rows)

    pad = 0 if eos_token_id is None else eos_token_id
    return _beam_search(step, reorder, input_ids.repeat_interleave(num_beams, dim=0), num_beams,
                        max_new_tokens, eos_token_id, length_penalty, pad)


def _seq2seq_beam_search(model: T5, memory: torch.Tensor, attention_mask: torch.Tensor | None,
                         start_ids: torch.Tensor, max_new_tokens: int, num_beams: int,
                         eos_token_id: int | None, length_penalty: float) -> torch.Tensor:
    memory = memory.repeat_interleave(num_beams, dim=0)  # (B*K, S, C)
    mask = None if attention_mask is None else attention_mask.repeat_interleave(num_beams, dim=0)
    cache = model.new_kv_cache()

    def step(ids: torch.Tensor) -> torch.Tensor:  # (B*K, T) -> (B*K, V)
        return model.decode(ids[:, -1:], memory, mask, kv_cache=cache)[:, -1]

    def reorder(rows: torch.Tensor) -> None:
        for self_cache, _ in cache:
            self_cache.reorder(rows)  # the cross-attention cache is the same for all beams

    return _beam_search(step, reorder, start_ids.repeat_interleave(num_beams, dim=0), num_beams,
                        max_new_tokens, eos_token_id, length_penalty, model.config.pad_token_id)


def _beam_search(step: Callable[[torch.Tensor], torch.Tensor], reorder: Callable[[torch.Tensor], None],
                 ids: torch.Tensor, num_beams: int, max_new_tokens: int, eos_token_id: int | None,
                 length_penalty: float, pad_token_id: int) -> torch.Tensor:
    """Keep the num_beams best continuations of each row's prefix by summed
    log-probability. `ids` (B*K, T0): each prefix repeated K times; `step(ids)` gives the
    next token's logits (B*K, V) and keeps the model's cache; `reorder(rows)` makes the
    cache follow the surviving hypotheses. A continuation among the K best candidates that
    emits EOS becomes a finished hypothesis scored sum / length**length_penalty (length:
    the tokens generated, EOS included; the K best of them are kept), as transformers'
    `generate(num_beams=K, length_penalty=..., early_stopping=True)` does; a row stops once it has num_beams of them (early stopping: in a batch, its
    beams are not extended further while other rows go on) or at max_new_tokens. Returns each row's best hypothesis, (B, T0 + n), padded with pad_token_id."""
    K, device, prompt_len = num_beams, ids.device, ids.size(1)
    B = ids.size(0) // K
    scores = torch.full((B, K), float("-inf"), device=device)
    scores[:, 0] = 0.0  # all beams start identical: expand only the first
    finished: list[list[tuple[float, torch.Tensor]]] = [[] for _ in range(B)]
    for _ in range(max_new_tokens):
        logits = step(ids)  # (B*K, V)
        V = logits.size(-1)
        candidates = scores[:, :, None] + logits.float().log_softmax(-1).view(B, K, V)  # (B, K, V)
        top_scores, top_index = candidates.view(B, K * V).topk(2 * K, dim=-1)  # (B, 2K)
        beam, token = top_index // V, top_index % V  # (B, 2K) each
        next_scores = torch.full((B, K), float("-inf"), device=device)
        next_rows = torch.zeros(B, K, dtype=torch.long, device=device)
        next_tokens = torch.zeros(B, K, dtype=torch.long, device=device)
        for b in range(B):
            kept = 0
            if len(finished[b]) >= K:  # done: its beams stay -inf, only its finished hypotheses count
                next_rows[b] = torch.arange(b * K, b * K + K, device=device)
                next_tokens[b] = pad_token_id
                continue
            for rank, (score, k, t) in enumerate(zip(top_scores[b].tolist(), beam[b].tolist(), token[b].tolist())):
                if score == float("-inf") or kept == K:
                    break
                if eos_token_id is not None and t == eos_token_id:
                    # As transformers: an EOS finishes a hypothesis only from among the K best
                    # candidates, and the K best finished ones (by normalised score) are kept.
                    if rank < K:
                        sequence = torch.cat([ids[b * K + k], ids.new_tensor([t])])
                        finished[b].append((score / (sequence.numel() - prompt_len) ** length_penalty, sequence))
                        finished[b] = sorted(finished[b], key=lambda h: h[0], reverse=True)[:K]
                    continue
                next_scores[b, kept], next_rows[b, kept], next_tokens[b, kept] = score, b * K + k, t
                kept += 1
        rows = next_rows.flatten()  # (B*K,): which hypothesis each surviving beam extends
        reorder(rows)
        ids = torch.cat([ids[rows], next_tokens.view(-1, 1)], dim=1)  # (B*K, T+1)
        scores = next_scores
        if all(len(f) >= K for f in finished):
            break
    best = []
    for b in range(B):
        hypotheses = list(finished[b])
        length = ids.size(1) - prompt_len
        if len(hypotheses) < K:  # stopped by max_new_tokens: the unfinished beams compete too
            hypotheses += [(scores[b, k].item() / length**length_penalty, ids[b * K + k]) for k in range(K)
                           if scores[b, k] > float("-inf")]
        best.append(max(hypotheses, key=lambda h: h[0])[1])
    width = max(seq.numel() for seq in best)
    return torch.stack([nn.functional.pad(seq, (0, width - seq.numel()), value=pad_token_id) for seq in best])
