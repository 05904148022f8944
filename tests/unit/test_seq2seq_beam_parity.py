"""Beam search with a length penalty (stages/models/generation.py) gives token for token
what transformers' `generate(num_beams=4, length_penalty=..., early_stopping=True)` gives
on a T5ForConditionalGeneration converted from ours with the same weights, batched and
with padded sources. The weights are random but arranged so that hypotheses end (emit
</s>) at different steps and the length penalty changes the winners: the cases where
beam search implementations differ (which EOS candidates finish a hypothesis, which
finished ones are kept)."""

from __future__ import annotations

import os

import pytest
import torch

from stages.models import T5, T5Config
from stages.models.t5.convert import hf_t5_config, t5_to_hf_t5
from stages.models.generation import generate_seq2seq
from tests.support.pinned import import_pinned

os.environ.setdefault("HF_HUB_OFFLINE", "1")
transformers = import_pinned("transformers")

EOS, PAD = 1, 0


def models(seed: int, eos_scale: float) -> tuple[T5, torch.nn.Module]:
    torch.manual_seed(seed)
    config = T5Config(vocab_size=40, hidden_size=32, head_size=8, ff_size=64, num_layers=2, num_heads=4,
                      dropout=0.0, eos_token_id=EOS, pad_token_id=PAD, decoder_start_token_id=PAD)
    ours = T5(config).eval()
    with torch.no_grad():
        for parameter in ours.parameters():
            parameter.mul_(2.0)  # peaked distributions: clear winners, few ties
        # </s> along the mean output direction: likely at some steps, not at others
        ours.lm_head.weight[EOS] = ours.lm_head.weight[2:].mean(0) * eos_scale
    theirs = transformers.T5ForConditionalGeneration(transformers.T5Config(**hf_t5_config(config))).eval()
    theirs.load_state_dict(t5_to_hf_t5(ours.state_dict(), config))
    return ours, theirs


def up_to_eos(ids: torch.Tensor) -> list[list[int]]:
    """Each row without the start token, up to and including its first </s> (the two
    pad finished rows differently: ours with <pad>, transformers with </s>)."""
    rows = []
    for row in ids[:, 1:].tolist():
        rows.append(row[:row.index(EOS) + 1] if EOS in row else row)
    return rows


def sources() -> tuple[torch.Tensor, torch.Tensor]:
    """A batch of 8 sources, two of them right-padded."""
    source = torch.randint(2, 40, (8, 9), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(source)
    mask[1, 6:] = 0
    mask[3, 4:] = 0
    return source, mask


@pytest.mark.parametrize("seed,eos_scale", [(0, 40.0), (1, 10.0)])
@pytest.mark.parametrize("length_penalty", [0.6, 2.0])
def test_beam_search_equals_transformers_generate(seed, eos_scale, length_penalty):
    ours, theirs = models(seed, eos_scale)
    source, mask = sources()
    mine = up_to_eos(generate_seq2seq(ours, source, mask, max_new_tokens=10, num_beams=4,
                                      length_penalty=length_penalty, eos_token_id=EOS))
    with torch.no_grad():
        reference = up_to_eos(theirs.generate(input_ids=source, attention_mask=mask, max_new_tokens=10, num_beams=4,
                                              length_penalty=length_penalty, early_stopping=True, eos_token_id=EOS,
                                              pad_token_id=PAD, do_sample=False))
    assert mine == reference
    assert sum(EOS in row for row in mine) >= 1  # some hypotheses finished: EOS handling was exercised


def test_the_length_penalty_changes_the_winners_here():
    """The cases above would not notice a length penalty that is ignored."""
    ours, _ = models(0, 40.0)
    source, mask = sources()
    outputs = [up_to_eos(generate_seq2seq(ours, source, mask, max_new_tokens=10, num_beams=4, length_penalty=penalty,
                                          eos_token_id=EOS)) for penalty in (0.6, -1.0)]
    assert outputs[0] != outputs[1]
