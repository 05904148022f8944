"""GPT beam search and streamed tokens (stages.models.generation): with enough beams the
search is exact, rows of a batch are searched independently with EOS, and `on_token`
sees every chosen token in order, for GPT and T5."""

from __future__ import annotations

import itertools

import pytest
import torch

from stages.models import GPT, T5, GPTConfig, T5Config
from stages.models.generation import generate, generate_seq2seq

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tests/conftest.py


def tiny_gpt(vocab_size: int = 53) -> GPT:
    torch.manual_seed(0)
    config = GPTConfig(vocab_size=vocab_size, max_seq_len=24, num_layers=2, hidden_size=32, num_heads=4)
    model = GPT(config).eval()
    with torch.no_grad():  # peaked predictions: a beam and greedy path differ
        for p in model.parameters():
            p.mul_(4.0)
    return model


def continuation_log_prob(model: GPT, ids: torch.Tensor, prompt_len: int) -> float:
    with torch.no_grad():
        logits = model(ids[:, :-1])
    log_probs = logits.log_softmax(-1).gather(-1, ids[:, 1:, None])  # (1, T-1, 1)
    return log_probs[:, prompt_len - 1:].sum().item()


def test_gpt_beam_search_with_enough_beams_finds_the_exhaustive_optimum():
    model = tiny_gpt(vocab_size=5)
    prompt = torch.tensor([[1, 3, 2]])
    steps = 3
    candidates = [torch.tensor([[1, 3, 2, *tail]]) for tail in itertools.product(range(5), repeat=steps)]
    best = max(candidates, key=lambda ids: continuation_log_prob(model, ids, 3))
    beam = generate(model, prompt, steps, num_beams=25)  # 5^(steps-1) beams keep every prefix: exact
    assert torch.equal(beam, best)
    greedy = generate(model, prompt, steps)
    assert not torch.equal(beam, greedy)  # the search found more than the greedy path
    assert continuation_log_prob(model, beam, 3) > continuation_log_prob(model, greedy, 3)
    assert torch.equal(generate(model, prompt, steps, num_beams=1), greedy)


def test_gpt_beam_search_rows_are_independent_and_stop_at_eos():
    model = tiny_gpt()
    prompts = torch.randint(2, 53, (2, 5), generator=torch.Generator().manual_seed(1))
    free = generate(model, prompts[:1], 8, num_beams=3)
    eos = free[0, 7].item()  # a token the best hypothesis of row 0 emits
    together = generate(model, prompts, 8, num_beams=3, eos_token_id=eos)
    for row in range(2):
        alone = generate(model, prompts[row:row + 1], 8, num_beams=3, eos_token_id=eos)
        assert torch.equal(together[row, :alone.size(1)], alone[0])
        assert (together[row, alone.size(1):] == eos).all()  # padded with EOS
    generated = together[0, 5:].tolist()
    assert eos in generated and all(t == eos for t in generated[generated.index(eos):])


def test_on_token_streams_every_chosen_token_in_order():
    model = tiny_gpt()
    prompts = torch.randint(2, 53, (2, 4), generator=torch.Generator().manual_seed(2))
    seen = []
    out = generate(model, prompts, 6, do_sample=True, generator=torch.Generator().manual_seed(0),
                   on_token=lambda token: seen.append(token.tolist()))
    assert torch.tensor(seen).T.tolist() == out[:, 4:].tolist()

    torch.manual_seed(0)
    t5 = T5(T5Config(vocab_size=53, hidden_size=32, head_size=8, ff_size=64, num_layers=2, num_heads=4,
                     dropout=0.0)).eval()
    streamed = []
    ids = generate_seq2seq(t5, prompts, max_new_tokens=5, on_token=lambda token: streamed.append(token.tolist()))
    assert torch.tensor(streamed).T.tolist() == ids[:, 1:].tolist()
    sampled = generate_seq2seq(t5, prompts, max_new_tokens=5, do_sample=True, top_k=3,
                               generator=torch.Generator().manual_seed(0))
    again = generate_seq2seq(t5, prompts, max_new_tokens=5, do_sample=True, top_k=3,
                             generator=torch.Generator().manual_seed(0))
    assert torch.equal(sampled, again) and sampled.shape == (2, 6)
    with pytest.raises(ValueError, match="do_sample"):
        generate(model, prompts, 3, num_beams=2, do_sample=True)
