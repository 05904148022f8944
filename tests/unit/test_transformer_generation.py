"""Decoding the original Transformer through stages.models.generation, as a T5 is decoded:
the KV cache (with each new token at its own sinusoidal position) changes no logit and
no greedy choice, and beam search finds the exhaustive optimum. A freshly initialised
tied post-LN model decodes one token over and over (its own embedding wins the output
projection), so the tests use one trained for a few steps to write a different sequence
per row."""

from __future__ import annotations

import itertools

import pytest
import torch

from stages.models import T5Config, Transformer
from stages.models.generation import generate_seq2seq
from tests.support.perturb import perturb_

CONFIG = T5Config(variant="transformer", vocab_size=29, hidden_size=32, ff_size=64, num_layers=2, num_heads=4,
                  dropout=0.0)


pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tests/conftest.py


@pytest.fixture(scope="module")
def trained() -> Transformer:
    """A model that learned a different 6-token answer (ending with </s>) for each source."""
    torch.manual_seed(0)
    model = perturb_(Transformer(CONFIG), seed=3).train()  # perturbed: biases and norms matter
    source, mask = padded_sources()
    labels = torch.randint(2, 29, (3, 6), generator=torch.Generator().manual_seed(5))
    labels[:, -1] = CONFIG.eos_token_id
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for _ in range(40):
        _, loss = model(source, mask, labels=labels)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    assert loss.item() < 0.1, loss.item()
    return model.eval()


def padded_sources(vocab: int = 29) -> tuple[torch.Tensor, torch.Tensor]:
    source = torch.randint(2, vocab, (3, 9), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(source)
    mask[1, 6:] = 0
    mask[2, 3:] = 0
    return source.masked_fill(mask == 0, 0), mask


def uncached_greedy(model: Transformer, source, mask, steps: int) -> torch.Tensor:
    """The reference: every step decodes the whole prefix from scratch."""
    memory = model.encode(source, mask)
    ids = torch.full((source.size(0), 1), model.config.decoder_start_token_id)
    for _ in range(steps):
        logits = model.decode(ids, memory, mask)  # (B, T, V), no cache
        ids = torch.cat([ids, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
    return ids


def test_cached_greedy_equals_uncached_greedy(trained):
    model = trained
    source, mask = padded_sources()
    with torch.no_grad():
        cached = generate_seq2seq(model, source, mask, max_new_tokens=12)
        uncached = uncached_greedy(model, source, mask, 12)
    assert cached.shape == (3, 13) and torch.equal(cached, uncached)
    assert len({tuple(row.tolist()) for row in cached}) == 3  # the rows decode differently
    with torch.no_grad():  # and teacher forcing the output reproduces every choice
        logits, _ = model(source, mask, decoder_input_ids=cached[:, :-1])
    assert torch.equal(logits.argmax(-1), cached[:, 1:])


def test_cached_logits_equal_full_recompute_at_every_step(trained):
    model = trained
    source, mask = padded_sources()
    target = torch.randint(2, 29, (3, 10), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        memory = model.encode(source, mask)
        full = model.decode(target, memory, mask)
        cache = model.new_kv_cache()
        steps = [model.decode(target[:, a:b], memory, mask, kv_cache=cache)  # prefill 4, then 1 + 2 + 3
                 for a, b in [(0, 4), (4, 5), (5, 7), (7, 10)]]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=1e-5, atol=1e-5)
    assert cache[0][0].length == 10 and cache[0][1].length == 9  # self: the target; cross: the source
    # the positions matter: the same token decoded at another position gives other logits
    with torch.no_grad():
        shifted = model.decode(target[:, 4:5], memory, mask)  # position 0 instead of 4
    assert (shifted[:, 0] - full[:, 4]).abs().max() > 1e-3


def test_beam_search_with_enough_beams_finds_the_exhaustive_optimum(trained):
    # 3 steps over 29 tokens: 29^2 beams keep every 2-token prefix, so the search is exact,
    # and the self-attention cache must be reordered right for the third step.
    model, source = trained, padded_sources()[0][:1]
    every = torch.tensor(list(itertools.product(range(29), repeat=3)))  # (29^3, 3)
    targets = torch.cat([torch.zeros(len(every), 1, dtype=torch.long), every], dim=1)  # start token first
    with torch.no_grad():
        logits, _ = model(source.expand(len(targets), -1), decoder_input_ids=targets[:, :-1])
    log_probs = logits.log_softmax(-1).gather(-1, targets[:, 1:, None]).sum(dim=(1, 2))  # (29^3,)
    best = targets[log_probs.argmax()]
    beam = generate_seq2seq(model, source, max_new_tokens=3, num_beams=29**2)
    assert torch.equal(beam[0], best)
    greedy = generate_seq2seq(model, source, max_new_tokens=3)
    assert torch.equal(generate_seq2seq(model, source, max_new_tokens=3, num_beams=1), greedy)
