"""Decoding with a KV cache: cached == uncached greedy for GPT (and Hugging Face's greedy),
sampling filters, T5 greedy vs Hugging Face, beam search vs exhaustive search."""

from __future__ import annotations

import itertools
import os

import pytest
import torch

from stages.models import GPT, T5, GPTConfig, T5Config
from stages.models.attention import KVCache
from stages.models.generation import filter_logits, generate, generate_seq2seq, next_token
from tests.support.pinned import import_pinned

GPT_CONFIG = GPTConfig(vocab_size=53, max_seq_len=40, num_layers=2, hidden_size=32, num_heads=4)
T5_CONFIG = T5Config(vocab_size=53, hidden_size=32, head_size=8, ff_size=64, num_layers=2, num_heads=4, dropout=0.0)


def tiny_gpt() -> GPT:
    torch.manual_seed(0)
    return GPT(GPT_CONFIG).eval()


def tiny_t5(**overrides) -> T5:
    torch.manual_seed(0)
    return T5(T5Config(**{**T5_CONFIG.__dict__, **overrides})).eval()


def prompt(batch: int = 2, seq_len: int = 5, seed: int = 1, vocab: int = 53) -> torch.Tensor:
    return torch.randint(2, vocab, (batch, seq_len), generator=torch.Generator().manual_seed(seed))


def test_cached_logits_equal_full_recompute_at_every_step():
    model = tiny_gpt()
    ids = prompt(seq_len=12)
    cache = model.new_kv_cache()
    with torch.no_grad():
        full = model(ids)
        first = model(ids[:, :7], kv_cache=cache)  # prefill 7, then 2 + 1 + 2 tokens
        steps = [first] + [model(ids[:, a:b], kv_cache=cache) for a, b in [(7, 9), (9, 10), (10, 12)]]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=1e-5, atol=1e-5)
    assert cache[0].length == 12


def test_cached_greedy_generation_equals_uncached_argmax_generation():
    model = tiny_gpt()
    ids = prompt()
    cached = generate(model, ids, max_new_tokens=15)
    uncached = generate(model, ids, max_new_tokens=15, use_cache=False)
    assert cached.shape == (2, 20)
    assert torch.equal(cached, uncached)
    # and the reference really is argmax of a full forward pass at each step
    with torch.no_grad():
        logits = model(cached[:, :-1])
    assert torch.equal(logits[:, 4:].argmax(-1), cached[:, 5:])


def test_gpt_greedy_matches_hugging_face_generate():
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    transformers = import_pinned("transformers")
    from stages.models.gpt.convert import gpt_to_hf_gpt2, hf_gpt2_config

    model = tiny_gpt()
    hf = transformers.GPT2LMHeadModel(transformers.GPT2Config(**hf_gpt2_config(GPT_CONFIG), bos_token_id=None,
                                                              eos_token_id=None, pad_token_id=0)).eval()
    hf.load_state_dict(gpt_to_hf_gpt2(model.state_dict(), GPT_CONFIG.num_layers), strict=False)
    ids = prompt()
    theirs = hf.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=10, do_sample=False)
    assert torch.equal(generate(model, ids, 10), theirs)


def test_generation_stops_at_eos_and_pads_finished_rows_with_it():
    model = tiny_gpt()
    ids = prompt()
    free = generate(model, ids, 10)
    eos = free[0, 7].item()  # the third generated token of row 0
    out = generate(model, ids, 10, eos_token_id=eos)
    assert torch.equal(out[0, :8], free[0, :8])
    assert (out[0, 8:] == eos).all()


def test_top_k_and_top_p_filtering():
    logits = torch.log(torch.tensor([[0.5, 0.25, 0.15, 0.1]]))
    assert torch.isinf(filter_logits(logits, top_k=2)).tolist() == [[False, False, True, True]]
    assert torch.isinf(filter_logits(logits, top_p=0.7)).tolist() == [[False, False, True, True]]
    assert torch.isinf(filter_logits(logits, top_p=0.75)).tolist() == [[False, False, True, True]]
    assert torch.isinf(filter_logits(logits, top_p=0.76)).tolist() == [[False, False, False, True]]
    assert torch.isinf(filter_logits(logits, top_p=0.01)).tolist() == [[False, True, True, True]]
    shuffled = logits[:, [2, 0, 3, 1]]
    assert torch.isinf(filter_logits(shuffled, top_p=0.7)).tolist() == [[True, False, True, False]]


def test_sampling_respects_filters_temperature_and_seed():
    logits = torch.log(torch.tensor([[0.5, 0.25, 0.15, 0.1]])).repeat(2000, 1)
    draws = next_token(logits, do_sample=True, top_k=2, generator=torch.Generator().manual_seed(0))
    assert set(draws.tolist()) == {0, 1}
    assert (draws == 0).float().mean().item() == pytest.approx(2 / 3, abs=0.05)
    cold = next_token(logits, do_sample=True, temperature=0.05, generator=torch.Generator().manual_seed(0))
    assert (cold == 0).all()
    model = tiny_gpt()
    a = generate(model, prompt(), 8, do_sample=True, top_p=0.9, generator=torch.Generator().manual_seed(3))
    b = generate(model, prompt(), 8, do_sample=True, top_p=0.9, generator=torch.Generator().manual_seed(3))
    assert torch.equal(a, b)
    with pytest.raises(ValueError, match="temperature"):
        next_token(logits, do_sample=True, temperature=0.0)


def test_kv_cache_reorder_keeps_selected_rows():
    cache = KVCache()
    k = torch.arange(3.0)[:, None, None, None].expand(3, 1, 2, 4)
    cache.append(k, k)
    cache.reorder(torch.tensor([2, 2, 0]))
    assert cache.keys[:, 0, 0, 0].tolist() == [2.0, 2.0, 0.0]


def test_t5_cached_greedy_matches_hugging_face_greedy():
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    transformers = import_pinned("transformers")
    from stages.models.t5.convert import hf_t5_config, t5_to_hf_t5

    model = tiny_t5()
    hf = transformers.T5ForConditionalGeneration(transformers.T5Config(**hf_t5_config(model.config))).eval()
    hf.load_state_dict(t5_to_hf_t5(model.state_dict(), model.config))
    source = prompt(seq_len=8)
    mask = torch.ones_like(source)
    mask[1, 6:] = 0
    ours = generate_seq2seq(model, source, mask, max_new_tokens=12)
    theirs = hf.generate(input_ids=source, attention_mask=mask, max_new_tokens=12, do_sample=False, eos_token_id=None)
    assert torch.equal(ours, theirs)
    # the cache changes nothing: teacher-forcing the output reproduces each argmax
    with torch.no_grad():
        logits, _ = model(source, mask, decoder_input_ids=ours[:, :-1])
    assert torch.equal(logits.argmax(-1), ours[:, 1:])


def sequence_log_prob(model: T5, source: torch.Tensor, target: torch.Tensor) -> float:
    with torch.no_grad():
        logits, _ = model(source, decoder_input_ids=target[:, :-1])
    return logits.log_softmax(-1).gather(-1, target[:, 1:, None]).sum().item()


def test_beam_search_with_enough_beams_finds_the_exhaustive_optimum():
    model = tiny_t5(vocab_size=5)
    source = prompt(batch=1, seq_len=6, vocab=5)
    steps = 3
    best = max(
        (torch.tensor([[0, *tail]]) for tail in itertools.product(range(5), repeat=steps)),
        key=lambda target: sequence_log_prob(model, source, target),
    )
    beam = generate_seq2seq(model, source, max_new_tokens=steps, num_beams=25)  # 5^(steps-1): exact
    assert torch.equal(beam, best)
    greedy = generate_seq2seq(model, source, max_new_tokens=steps)
    assert sequence_log_prob(model, source, beam) >= sequence_log_prob(model, source, greedy) - 1e-6
    assert torch.equal(generate_seq2seq(model, source, max_new_tokens=steps, num_beams=1), greedy)


def test_beam_search_batches_rows_independently_and_handles_eos():
    model = tiny_t5()
    sources = prompt(batch=2, seq_len=7)
    together = generate_seq2seq(model, sources, max_new_tokens=6, num_beams=3, eos_token_id=1)
    for row in range(2):
        alone = generate_seq2seq(model, sources[row : row + 1], max_new_tokens=6, num_beams=3, eos_token_id=1)
        width = alone.size(1)
        assert torch.equal(together[row, :width], alone[0])
    assert together[:, 0].eq(0).all()  # starts with the decoder start token
