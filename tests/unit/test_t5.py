"""T5: encoder padding, causal decoder, relative position bias, RMSNorm, tied-head
scaling, teacher forcing. CPU, tiny configs; Hugging Face parity is in
test_hf_interop.py."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from stages.models import T5, T5Config
from stages.models.norms import RMSNorm
from stages.models.positions import RelativePositionBias, relative_position_bucket

CONFIG = T5Config(vocab_size=61, hidden_size=32, head_size=8, ff_size=64, num_layers=2, num_heads=4, dropout=0.0)


def tiny_t5(seed: int = 0, **overrides) -> T5:
    torch.manual_seed(seed)
    return T5(T5Config(**{**CONFIG.__dict__, **overrides})).eval()


def random_ids(batch: int = 2, seq_len: int = 9, seed: int = 1) -> torch.Tensor:
    return torch.randint(2, CONFIG.vocab_size, (batch, seq_len), generator=torch.Generator().manual_seed(seed))


def test_encoder_padding_does_not_change_real_outputs_or_the_decoder():
    model = tiny_t5()
    source = random_ids(batch=1, seq_len=6)
    padded = torch.cat([source, torch.zeros(1, 4, dtype=torch.long)], dim=1)
    mask = torch.tensor([[1] * 6 + [0] * 4])
    target = random_ids(batch=1, seq_len=5, seed=2)
    with torch.no_grad():
        torch.testing.assert_close(model.encode(padded, mask)[:, :6], model.encode(source), rtol=1e-5, atol=1e-5)
        alone, _ = model(source, decoder_input_ids=target)
        batched, _ = model(padded, mask, decoder_input_ids=target)
    torch.testing.assert_close(batched, alone, rtol=1e-5, atol=1e-5)


def test_decoder_is_causal_and_encoder_is_not():
    model = tiny_t5()
    source, target = random_ids(), random_ids(seed=2)
    changed_target = target.clone()
    changed_target[:, 6] = (changed_target[:, 6] + 1) % CONFIG.vocab_size
    changed_source = source.clone()
    changed_source[:, -1] = (changed_source[:, -1] + 1) % CONFIG.vocab_size
    with torch.no_grad():
        base, _ = model(source, decoder_input_ids=target)
        later, _ = model(source, decoder_input_ids=changed_target)
        other_source, _ = model(changed_source, decoder_input_ids=target)
    torch.testing.assert_close(base[:, :6], later[:, :6], rtol=0, atol=1e-6)
    assert not torch.allclose(base[:, 6], later[:, 6])
    assert not torch.allclose(base[:, 0], other_source[:, 0])  # every target position reads all the source


def test_relative_buckets_exact_then_logarithmic_and_causal_folds_the_future():
    offsets = torch.arange(-200, 201)
    bidirectional = relative_position_bucket(offsets, bidirectional=True, num_buckets=32, max_distance=128)
    causal = relative_position_bucket(offsets, bidirectional=False, num_buckets=32, max_distance=128)
    # bidirectional: 16 buckets each side, the first 8 exact
    assert bidirectional[200 - torch.arange(8)].tolist() == list(range(8))  # keys 0..7 back: exact
    assert bidirectional[200 + torch.arange(1, 8)].tolist() == list(range(17, 24))  # keys ahead: upper half
    assert bidirectional.max().item() == 31 and bidirectional[-1].item() == 31  # +200 saturates
    assert causal[201:].eq(0).all()  # later keys: bucket 0 (the causal mask hides them)
    assert causal[:200].flip(0)[:16].tolist() == list(range(1, 17))  # 1..16 back exact
    assert causal.max().item() == 31
    bias = RelativePositionBias(num_heads=4, bidirectional=True)
    assert bias(5, 7).shape == (1, 4, 5, 7)
    torch.testing.assert_close(bias(1, 7, past=4), bias(5, 7)[:, :, 4:])


def test_rms_norm_has_unit_rms_and_no_bias():
    norm = RMSNorm(16)
    x = torch.randn(3, 16) * 5
    y = norm(x)
    torch.testing.assert_close(y.pow(2).mean(-1), torch.ones(3), rtol=1e-4, atol=1e-4)
    assert [name for name, _ in norm.named_parameters()] == ["weight"]
    assert norm(x.bfloat16().to(torch.float32)).dtype == torch.float32


def test_no_biases_anywhere():
    assert not [n for n, _ in tiny_t5().named_parameters() if n.endswith(".bias")]


def test_tied_head_scales_decoder_output_and_untied_does_not():
    tied = tiny_t5()
    assert tied.lm_head.weight is tied.shared.weight
    untied = tiny_t5(tie_word_embeddings=False, feed_forward="gated-gelu")
    assert untied.lm_head.weight is not untied.shared.weight
    source, target = random_ids(), random_ids(seed=2)
    for model, scale in [(tied, CONFIG.hidden_size**-0.5), (untied, 1.0)]:
        with torch.no_grad():
            hidden = model.decoder(model.shared(target), model.encode(source), None)
            logits, _ = model(source, decoder_input_ids=target)
        torch.testing.assert_close(logits, model.lm_head(hidden * scale), rtol=1e-5, atol=1e-5)


def test_labels_are_shifted_right_from_the_start_token_and_minus_100_is_ignored():
    model = tiny_t5()
    labels = torch.tensor([[5, 6, 7, -100], [8, 9, 1, 3]])
    assert model.shift_right(labels).tolist() == [[0, 5, 6, 7], [0, 8, 9, 1]]
    source = random_ids()
    logits, loss = model(source, labels=labels)
    keep = labels != -100
    torch.testing.assert_close(loss, F.cross_entropy(logits[keep], labels[keep]))
    with pytest.raises(ValueError, match="decoder_input_ids or labels"):
        model(source)


def test_overfitting_one_batch_drives_the_loss_down():
    model = tiny_t5(feed_forward="gated-gelu").train()
    source, labels = random_ids(batch=4), random_ids(batch=4, seq_len=6, seed=5)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    _, first = model(source, labels=labels)
    for _ in range(40):
        _, loss = model(source, labels=labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert loss.item() < 0.25 * first.item()


def test_config_errors():
    with pytest.raises(ValueError, match="feed_forward"):
        T5Config(vocab_size=10, feed_forward="swiglu")
    assert T5Config(vocab_size=10, num_layers=3).num_decoder_layers == 3
