"""Presets with their published parameter counts (counted on the meta device: nothing is
allocated), FLOPs per token against hand-computed values, and activation checkpointing
applied from outside leaving losses and gradients unchanged."""

from __future__ import annotations

import copy

import pytest
import torch

from stages.models import GPT, T5, BertForPreTraining, GPTConfig
from stages.models.checkpointing import apply_activation_checkpointing
from stages.models.build import build_preset
from stages.models.config import PRESETS, preset_config
from tests.support.pretraining_loss import bert_pretraining_loss, causal_lm_loss


def on_meta(name: str) -> torch.nn.Module:
    with torch.device("meta"):
        return build_preset(name)


# Published sizes: GPT-2 (Radford et al. 2019, as counted by Hugging Face), BERT
# (BertModel, i.e. encoder + pooler, as in Devlin et al. and Turc et al.), T5 (Raffel et al.).
@pytest.mark.parametrize(
    ("name", "expected", "published"),
    [
        ("gpt2-small", 124_439_808, "124M"),
        ("gpt2-medium", 354_823_168, "355M"),
        ("bert-tiny", 4_385_920, "4.4M"),
        ("bert-mini", 11_170_560, "11.2M"),
        ("bert-small", 28_763_648, "28.8M"),
        ("bert-medium", 41_373_184, "41.4M"),
        ("bert-base", 109_482_240, "110M"),
        ("bert-large", 335_141_888, "340M"),
        ("t5-small", 60_506_624, "60M"),
        ("t5-base", 222_903_552, "220M"),
        ("t5-v1_1-small", 76_961_152, "77M"),
        # Llama-style: HF LlamaForCausalLM counts of JackFram/llama-160m and TinyLlama-1.1B.
        ("llama-160m", 162_417_408, "160M"),
        ("tinyllama-1.1b", 1_100_048_384, "1.1B"),
    ],
)
def test_preset_parameter_counts(name, expected, published):
    model = on_meta(name)
    count = model.backbone.num_parameters() if isinstance(model, BertForPreTraining) else model.num_parameters()
    assert count == expected, f"{name} should have {published} parameters"


def test_bert_pretraining_heads_add_the_hugging_face_amount():
    # BertForPreTraining = BertModel + transform (C*C + C + 2C) + decoder bias V + NSP (2C + 2)
    model = on_meta("bert-base")
    assert model.num_parameters() == 110_106_428


def test_debug_presets_are_tiny_and_run():
    for name in ("gpt-debug", "llama-debug", "bert-debug", "t5-debug"):
        model = build_preset(name).eval()
        assert model.num_parameters() < 250_000
        ids = torch.randint(0, 512, (1, 8))
        logits = model(ids, decoder_input_ids=ids)[0] if isinstance(model, T5) else model(ids)
        logits = logits[0] if isinstance(logits, tuple) else logits  # BERT: (MLM logits, pair logits)
        assert logits.shape == (1, 8, 512)


def test_preset_errors_name_the_closest_preset_and_valid_fields():
    with pytest.raises(ValueError, match="did you mean 'bert-base'"):
        preset_config("bert-bsae")
    with pytest.raises(ValueError, match="num_layer"):
        preset_config("gpt-debug", num_layer=3)
    assert preset_config("t5-small", dropout=0.0).dropout == 0.0
    assert set(PRESETS) >= {"gpt2-small", "gpt2-medium", "bert-large", "t5-base"}


def test_flops_per_token_match_hand_computed_values():
    # GPT-2 small at 1024 tokens: N = 124,439,808 - 1024*768 (positions);
    # 6N + 12 * 12 layers * 768 * 1024.
    assert on_meta("gpt2-small").flops_per_token() == 6 * 123_653_376 + 12 * 12 * 768 * 1024 == 855_166_464
    # TinyLlama at 2048: N = 1,100,048,384 - 32000*2048 (the untied embedding is a lookup;
    # its separate head is counted); attention reads all 32 query heads: 12 * 22 * 2048 * 2048.
    assert on_meta("tinyllama-1.1b").flops_per_token() == 6 * 1_034_512_384 + 12 * 22 * 2048 * 2048
    # BERT-base pre-training at 512: N = 110,106,428 - 512*768 - 2*768 (position, token type).
    assert on_meta("bert-base").flops_per_token(512) == 6 * 109_711_676 + 12 * 12 * 768 * 512 == 714_893_160
    # T5-small, 512 source / 128 target tokens. Encoder block: qkv 512*1536 + out 512*512
    # + ReLU FFN 2*512*2048 + 2 norms = 3,146,752 (x6, + final norm = 18,881,024).
    # Decoder block: self 4*512*512 + cross 4*512*512 + FFN + 3 norms = 4,195,840
    # (x6, + final norm = 25,175,552). Head: 32128 * 512 = 16,449,536 (tied, counted once).
    n_enc, n_dec, n_head = 18_881_024, 25_175_552, 16_449_536
    assert n_enc + n_dec + n_head + 2 * 32 * 8 == 60_506_624  # + two bias tables = all parameters
    S, T, inner, L = 512, 128, 512, 6
    expected = 6 * (n_enc * S + (n_dec + n_head) * T) + 12 * inner * (L * S * S + L * (T * T + T * S))
    t5 = on_meta("t5-small")
    assert t5.flops_per_example(S, T) == expected
    assert t5.flops_per_token(128) == t5.flops_per_example(128, 128) // 256


def models_with_dropout() -> list[tuple[torch.nn.Module, str]]:
    torch.manual_seed(0)
    return [
        (GPT(GPTConfig(vocab_size=97, max_seq_len=16, num_layers=2, hidden_size=32, num_heads=4, dropout=0.1)), "gpt"),
        (build_preset("bert-debug", num_layers=2), "bert"),
        (build_preset("t5-debug", feed_forward="gated-gelu", tie_word_embeddings=False), "t5"),
        (build_preset("transformer-debug", dropout=0.1), "t5"),  # the original Transformer's own blocks
    ]


def loss_of(model: torch.nn.Module, family: str) -> torch.Tensor:
    ids = torch.randint(0, 97, (2, 12), generator=torch.Generator().manual_seed(1))
    torch.manual_seed(7)  # same dropout masks in both runs
    if family == "t5":
        return model(ids, labels=ids)[1]
    if family == "gpt":
        return causal_lm_loss(model(ids), ids)
    return bert_pretraining_loss(*model(ids), ids)


@pytest.mark.parametrize("index", [0, 1, 2, 3], ids=["gpt", "bert", "t5", "transformer"])
def test_activation_checkpointing_keeps_loss_gradients_and_state_dict(index):
    model, family = models_with_dropout()[index]
    model.train()
    checkpointed = copy.deepcopy(model)
    wrapped = apply_activation_checkpointing(checkpointed)
    expected_blocks = {"gpt": 2, "bert": 2, "t5": 4}[family]
    assert wrapped == expected_blocks
    assert apply_activation_checkpointing(checkpointed) == 0  # idempotent
    assert list(checkpointed.state_dict()) == list(model.state_dict())

    reference = loss_of(model, family)
    reference.backward()
    calls = []
    first_mlp = next(m for n, m in checkpointed.named_modules() if n.endswith("blocks.0.mlp"))
    first_mlp.register_forward_pre_hook(lambda *_: calls.append(1))
    loss = loss_of(checkpointed, family)
    loss.backward()
    assert len(calls) == 2  # forward, then recomputed during backward
    torch.testing.assert_close(loss, reference, rtol=0, atol=0)
    for (name, p), q in zip(model.named_parameters(), checkpointed.parameters()):
        torch.testing.assert_close(q.grad, p.grad, rtol=1e-5, atol=1e-6, msg=name)


@pytest.mark.parametrize("name", sorted(name for name in PRESETS if name.endswith("-debug")))
def test_every_block_of_every_model_is_checkpointed_and_compiled(name):
    """pretrain.activation_checkpointing and pretrain.compile find blocks by type
    (checkpointing.BLOCK_TYPES): every module in every model's `blocks` lists must be one,
    ELECTRA's generator's included, or that model silently trains without either."""
    from stages.training.parallelize import apply_compile

    model = build_preset(name)
    lists = [module for path, module in model.named_modules() if path.rsplit(".", 1)[-1] == "blocks"]
    blocks = {id(block): block for blocks in lists for block in blocks}  # ALBERT's shared block once
    assert lists and blocks, f"{name}: no `blocks` list found; update this test for the new layout"
    if name == "electra-debug":
        assert any(path.startswith("generator.") for path, module in model.named_modules() if module in lists)
    assert apply_activation_checkpointing(model) == len(blocks)
    assert apply_compile(model, backend="eager") == len(blocks)  # compiles lazily: nothing runs here
    missed = [type(block).__name__ for block in blocks.values()
              if not (getattr(block, "is_checkpointed", False) and getattr(block, "is_compiled", False))]
    assert not missed, f"{name}: blocks not in checkpointing.BLOCK_TYPES: {sorted(set(missed))}"


def test_rotary_embedding_makes_scores_depend_only_on_the_offset():
    from stages.models.positions import RotaryEmbedding

    rotary = RotaryEmbedding(head_size=8)
    q, k = torch.randn(1, 1, 1, 8), torch.randn(1, 1, 1, 8)
    score = lambda q_pos, k_pos: (rotary(q, past=q_pos) * rotary(k, past=k_pos)).sum().item()  # noqa: E731
    assert score(5, 2) == pytest.approx(score(13, 10), abs=1e-4)
    assert score(5, 2) != pytest.approx(score(5, 4), abs=1e-4)
    torch.testing.assert_close(rotary(q).norm(), q.norm())  # a rotation keeps the norm


def test_t5_v1_1_small_loads_although_its_6_heads_do_not_divide_512():
    # T5 v1.1 small: 6 heads of 64 (384) on d_model 512; it used to be refused at config load.
    from stages.pretrain.config import PretrainConfig

    fields = PretrainConfig(model={"preset": "t5-v1_1-small"}).model.architecture()
    assert (fields["hidden_size"], fields["num_heads"], fields["head_size"]) == (512, 6, 64)
    with pytest.raises(ValueError, match="not divisible by num_heads=6"):
        PretrainConfig(model={"family": "gpt", "hidden_size": 512, "num_heads": 6})
