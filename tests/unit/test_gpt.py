"""GPT-2 model: causality, masking, weight tying, init, parameter count, loss, save/load,
and parity with Hugging Face GPT-2. CPU, tiny configs, seconds."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from stages.models import GPT, GPTConfig, build_model, load_pretrained, save_pretrained
from stages.models.gpt.convert import gpt_to_hf_gpt2, hf_gpt2_config, hf_gpt2_to_gpt
from tests.support.pinned import import_pinned
from tests.support.pretraining_loss import causal_lm_loss

TINY = dict(vocab_size=97, max_seq_len=16, num_layers=2, hidden_size=32, num_heads=4)


def tiny_gpt(seed: int = 0, **overrides) -> GPT:
    torch.manual_seed(seed)
    return GPT(GPTConfig(**{**TINY, **overrides})).eval()


def random_ids(batch: int = 2, seq_len: int = 12, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, TINY["vocab_size"], (batch, seq_len), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("with_mask", [False, True], ids=["sdpa-causal", "explicit-mask"])
def test_changing_a_future_token_leaves_earlier_logits_unchanged(with_mask):
    model = tiny_gpt()
    ids = random_ids()
    mask = torch.ones_like(ids) if with_mask else None
    t = 5
    changed = ids.clone()
    changed[:, t + 1] = (changed[:, t + 1] + 1) % TINY["vocab_size"]
    with torch.no_grad():
        before = model(ids, attention_mask=mask)
        after = model(changed, attention_mask=mask)
    torch.testing.assert_close(before[:, : t + 1], after[:, : t + 1], rtol=0, atol=1e-6)
    assert not torch.allclose(before[:, t + 1], after[:, t + 1])  # the changed position did move


def test_explicit_all_ones_mask_matches_the_causal_fast_path():
    model = tiny_gpt()
    ids = random_ids()
    with torch.no_grad():
        fast = model(ids)
        masked = model(ids, attention_mask=torch.ones_like(ids))
    torch.testing.assert_close(fast, masked, rtol=1e-5, atol=1e-5)


def test_right_padding_does_not_change_real_token_outputs():
    model = tiny_gpt()
    ids = random_ids(batch=1, seq_len=8)
    padded = torch.cat([ids, torch.full((1, 4), 3)], dim=1)  # 4 pad tokens (id 3)
    mask = torch.tensor([[1] * 8 + [0] * 4])
    with torch.no_grad():
        alone = model.hidden_states(ids)
        with_padding = model.hidden_states(padded, attention_mask=mask)
    torch.testing.assert_close(alone, with_padding[:, :8], rtol=1e-5, atol=1e-5)


def test_left_padding_hides_pad_tokens_and_stays_finite():
    model = tiny_gpt()
    ids = random_ids(batch=1, seq_len=10)
    mask = torch.tensor([[0] * 3 + [1] * 7])
    other_pads = ids.clone()
    other_pads[:, :3] = 0  # different pad token ids must not matter to real tokens
    with torch.no_grad():
        a = model.hidden_states(ids, attention_mask=mask)
        b = model.hidden_states(other_pads, attention_mask=mask)
    assert torch.isfinite(a).all()
    torch.testing.assert_close(a[:, 3:], b[:, 3:], rtol=1e-5, atol=1e-5)


def test_lm_head_is_tied_to_the_token_embedding():
    model = tiny_gpt()
    assert model.lm_head.weight is model.token_embedding.weight
    ids = random_ids()
    causal_lm_loss(model(ids), ids).backward()
    assert model.token_embedding.weight.grad is not None
    # Counted once: the tied matrix is one parameter.
    assert sum(1 for p in model.parameters() if p is model.token_embedding.weight) == 1


def test_parameter_count_matches_a_hand_count():
    V, T, L, C = TINY["vocab_size"], TINY["max_seq_len"], TINY["num_layers"], TINY["hidden_size"]
    per_block = (
        2 * C  # attn_norm
        + C * 3 * C + 3 * C  # qkv_proj
        + C * C + C  # out_proj
        + 2 * C  # mlp_norm
        + C * 4 * C + 4 * C  # fc_in
        + 4 * C * C + C  # fc_out
    )
    expected = V * C + T * C + L * per_block + 2 * C  # embeddings, blocks, final_norm; head tied
    model = tiny_gpt()
    assert model.num_parameters() == expected
    assert model.num_parameters(exclude_position_embedding=True) == expected - T * C
    assert model.flops_per_token() == 6 * (expected - T * C) + 12 * L * C * T


def test_gpt2_small_has_124m_parameters():
    # The published size of GPT-2 small (124M, 12 layers, 768 wide, 50257 tokens, 1024 positions).
    with torch.device("meta"):
        model = GPT(GPTConfig(vocab_size=50257, max_seq_len=1024, num_layers=12, hidden_size=768, num_heads=12))
    assert model.num_parameters() == 124_439_808


def test_init_follows_gpt2_with_scaled_residual_projections():
    model = tiny_gpt(num_layers=8, hidden_size=256, vocab_size=2000)
    block = model.blocks[0]
    assert block.attn.qkv_proj.weight.std().item() == pytest.approx(0.02, rel=0.05)
    residual_std = 0.02 / math.sqrt(2 * 8)
    assert block.attn.out_proj.weight.std().item() == pytest.approx(residual_std, rel=0.05)
    assert block.mlp.fc_out.weight.std().item() == pytest.approx(residual_std, rel=0.05)
    assert model.token_embedding.weight.std().item() == pytest.approx(0.02, rel=0.05)
    assert torch.all(block.attn.qkv_proj.bias == 0)


def test_loss_is_next_token_cross_entropy_with_ignore_index():
    model = tiny_gpt()
    ids = random_ids()
    labels = ids.clone()
    labels[:, 7:] = -100
    logits = model(ids)
    loss = causal_lm_loss(logits, labels)
    expected = F.cross_entropy(logits[:, :6].reshape(-1, TINY["vocab_size"]), ids[:, 1:7].reshape(-1))
    torch.testing.assert_close(loss, expected)
    assert logits.shape == (2, 12, TINY["vocab_size"])


def test_initial_loss_is_near_uniform():
    model = tiny_gpt()
    ids = random_ids(batch=8)
    loss = causal_lm_loss(model(ids), ids)
    assert loss.item() == pytest.approx(math.log(TINY["vocab_size"]), rel=0.05)


def test_overfitting_one_batch_drives_the_loss_down():
    model = tiny_gpt().train()
    ids = random_ids(batch=4)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    first = causal_lm_loss(model(ids), ids)
    for _ in range(60):
        loss = causal_lm_loss(model(ids), ids)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert loss.item() < 0.25 * first.item()


def test_sequence_longer_than_max_seq_len_is_a_clear_error():
    with pytest.raises(ValueError, match="max_seq_len=16"):
        tiny_gpt()(random_ids(seq_len=17))


def test_heads_must_divide_hidden_size():
    with pytest.raises(ValueError, match="num_heads"):
        GPTConfig(vocab_size=10, max_seq_len=8, hidden_size=30, num_heads=4)


def test_save_and_load_round_trip(tmp_path):
    model = build_model({"family": "gpt", "num_layers": 2, "hidden_size": 32, "num_heads": 4}, 97, 16).eval()
    save_pretrained(model, tmp_path / "model")
    assert sorted(p.name for p in (tmp_path / "model").iterdir()) == ["model.safetensors", "model_config.json"]
    loaded = load_pretrained(tmp_path / "model").eval()
    assert loaded.config == model.config
    assert loaded.lm_head.weight is loaded.token_embedding.weight
    ids = random_ids()
    torch.testing.assert_close(loaded(ids), model(ids), rtol=0, atol=0)


def test_build_model_rejects_unknown_keys_and_families():
    with pytest.raises(ValueError, match="num_layer"):
        build_model({"family": "gpt", "num_layer": 2}, 97, 16)
    with pytest.raises(ValueError, match="unknown model family 'rwkv'"):
        build_model({"family": "rwkv"}, 97, 16)


def test_build_model_accepts_the_pretrain_config_section():
    from stages.pretrain.model_config import model_config

    model = build_model(model_config(num_layers=1, hidden_size=32, num_heads=2).architecture(), vocab_size=50, max_seq_len=8)
    assert (model.config.num_layers, model.config.vocab_size, model.config.max_seq_len) == (1, 50, 8)


def test_logits_match_hugging_face_gpt2_both_ways():
    transformers = import_pinned("transformers")
    model = tiny_gpt()
    hf_model = transformers.GPT2LMHeadModel(transformers.GPT2Config(**hf_gpt2_config(model.config))).eval()
    missing, unexpected = hf_model.load_state_dict(
        gpt_to_hf_gpt2(model.state_dict(), TINY["num_layers"]), strict=False
    )
    assert not unexpected and all(".attn.bias" in k or ".masked_bias" in k for k in missing)
    ids = random_ids()
    with torch.no_grad():
        ours = model(ids)
        theirs = hf_model(ids).logits
    torch.testing.assert_close(ours, theirs, rtol=1e-4, atol=1e-4)

    back = tiny_gpt(seed=123)
    back.load_state_dict(hf_gpt2_to_gpt(hf_model.state_dict(), TINY["num_layers"]), strict=True)
    with torch.no_grad():
        torch.testing.assert_close(back(ids), ours, rtol=0, atol=0)


def test_pretrain_model_section_says_how_to_fix_heads_that_do_not_divide():
    from stages.pretrain.model_config import model_config

    with pytest.raises(ValueError, match=r"hidden_size=100 is not divisible by num_heads=3.*one of \[1, 2, 4, 5"):
        model_config(hidden_size=100, num_heads=3)
    with pytest.raises(ValueError, match="extra"):
        model_config(num_layer=2)  # misspelled key
