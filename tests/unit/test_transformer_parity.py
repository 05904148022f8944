"""The original Transformer (t5 variant "transformer") against `torch.nn.Transformer`: the
same weights in nn.Transformer (post-LN, ReLU, batch_first, dropout 0) plus an
nn.Embedding scaled by sqrt(d_model), the sinusoidal positional encoding as PyTorch's
tutorial writes it, and the output projection tied to the embedding give the same
logits within 1e-5 (fp32, eval mode), with padded sources and targets and the causal
mask. nn.Transformer's extra final LayerNorms (encoder.norm, decoder.norm) are
nn.Identity: the paper's post-LN stacks have none (see stages/models/t5/transformer.py)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn as nn

from stages.models import T5Config, Transformer
from stages.models.positions import sinusoidal_positions
from tests.support.perturb import perturb_

VOCAB = 71
# 3 encoder and 2 decoder blocks so that a converter mixing up the stacks' layers fails.
CONFIG = T5Config(variant="transformer", vocab_size=VOCAB, hidden_size=32, ff_size=48, num_layers=3,
                  num_decoder_layers=2, num_heads=4, dropout=0.0)


def reference_transformer(config: T5Config) -> nn.Transformer:
    reference = nn.Transformer(d_model=config.hidden_size, nhead=config.num_heads,
                               num_encoder_layers=config.num_layers, num_decoder_layers=config.num_decoder_layers,
                               dim_feedforward=config.ff_size, dropout=0.0, activation="relu",
                               layer_norm_eps=config.layer_norm_eps, batch_first=True, norm_first=False)
    reference.encoder.norm = nn.Identity()  # the paper's post-LN stacks end with a block's own LayerNorm
    reference.decoder.norm = nn.Identity()
    # the plain path (no nested-tensor fast path, which skips padded positions in eval mode)
    reference.encoder.use_nested_tensor = False
    return reference


# Our names inside a block -> nn.TransformerEncoderLayer's / nn.TransformerDecoderLayer's
# (matched from the start of the name within the block).
ENCODER_NAMES = [("attn.qkv_proj.", "self_attn.in_proj_"), ("attn.out_proj.", "self_attn.out_proj."),
                 ("attn_norm.", "norm1."), ("mlp_norm.", "norm2."), ("mlp.fc_in.", "linear1."),
                 ("mlp.fc_out.", "linear2.")]
DECODER_NAMES = [("self_attn.qkv_proj.", "self_attn.in_proj_"), ("self_attn.out_proj.", "self_attn.out_proj."),
                 ("cross_attn.out_proj.", "multihead_attn.out_proj."), ("self_attn_norm.", "norm1."),
                 ("cross_attn_norm.", "norm2."), ("mlp_norm.", "norm3."), ("mlp.fc_in.", "linear1."),
                 ("mlp.fc_out.", "linear2.")]


def to_reference_state(ours: Transformer) -> dict[str, torch.Tensor]:
    """Our state dict in nn.Transformer's names. MultiheadAttention stacks q, k, v in one
    in_proj (as our self-attention's qkv_proj); our cross-attention keeps q apart from
    the fused k/v, so those two are concatenated."""
    out = {}
    for name, tensor in ours.state_dict().items():
        stack, _, index, inner = name.split(".", 3) if name.startswith(("encoder.", "decoder.")) else (None,) * 4
        if stack is None:
            continue  # the embedding (and its tied head): outside nn.Transformer
        table = ENCODER_NAMES if stack == "encoder" else DECODER_NAMES
        layer = f"{stack}.layers.{index}."
        if inner.startswith("cross_attn.") and not inner.startswith("cross_attn.out_proj."):
            kind = inner.rsplit(".", 1)[1]
            if inner.startswith("cross_attn.q_proj."):
                out[f"{layer}multihead_attn.in_proj_{kind}"] = torch.cat(
                    [tensor, ours.state_dict()[f"{stack}.blocks.{index}.cross_attn.kv_proj.{kind}"]])
            continue
        ours_prefix, theirs_prefix = next((a, b) for a, b in table if inner.startswith(a))
        out[layer + theirs_prefix + inner[len(ours_prefix):]] = tensor
    return out


def tutorial_positional_encoding(length: int, d_model: int) -> torch.Tensor:
    """PyTorch's sequence-to-sequence tutorial's PositionalEncoding, written independently
    of stages.models.positions: (length, d_model)."""
    position = torch.arange(length).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, d_model, 2) * (-math.log(10000.0) / d_model))
    pe = torch.zeros(length, d_model)
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)
    return pe


class ReferenceModel(nn.Module):
    """nn.Transformer with one scaled embedding for source and target and the tied projection."""

    def __init__(self, ours: Transformer):
        super().__init__()
        config = ours.config
        self.d_model = config.hidden_size
        self.embedding = nn.Embedding(config.vocab_size, config.hidden_size)
        self.embedding.weight.data.copy_(ours.shared.weight.data)
        self.transformer = reference_transformer(config)
        self.transformer.load_state_dict(to_reference_state(ours), strict=True)

    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        return self.embedding(ids) * math.sqrt(self.d_model) + tutorial_positional_encoding(ids.size(1), self.d_model)

    def forward(self, source, source_mask, target, target_mask) -> torch.Tensor:
        T = target.size(1)
        out = self.transformer(
            self.embed(source), self.embed(target),
            # bool masks throughout, True = may not attend (nn.Transformer's convention)
            tgt_mask=torch.ones(T, T, dtype=torch.bool).triu(diagonal=1), tgt_is_causal=True,
            src_key_padding_mask=source_mask == 0, tgt_key_padding_mask=target_mask == 0,
            memory_key_padding_mask=source_mask == 0,
        )  # (B, T, C)
        return out @ self.embedding.weight.T  # (B, T, V): the pre-softmax projection is the embedding


def padded_batch(seed: int = 1):
    generator = torch.Generator().manual_seed(seed)
    source = torch.randint(2, VOCAB, (3, 11), generator=generator)
    target = torch.randint(2, VOCAB, (3, 7), generator=generator)
    source_mask, target_mask = torch.ones_like(source), torch.ones_like(target)
    source_mask[1, 7:] = 0  # right padding, as the loaders write it
    source_mask[2, 4:] = 0
    target_mask[0, 5:] = 0
    target_mask[2, 3:] = 0
    return source.masked_fill(source_mask == 0, 0), source_mask, target.masked_fill(target_mask == 0, 0), target_mask


@pytest.mark.parametrize("seed", [0, 1])
def test_logits_match_torch_nn_transformer_with_padding_and_the_causal_mask(seed):
    torch.manual_seed(seed)
    ours = perturb_(Transformer(CONFIG), seed=seed)  # biases and LayerNorm gains off 0 / 1
    reference = ReferenceModel(ours).eval()
    source, source_mask, target, target_mask = padded_batch(seed)
    with torch.no_grad():
        logits, _ = ours(source, source_mask, decoder_input_ids=target)
        expected = reference(source, source_mask, target, target_mask)
    # Our decoder sees its own padding only from pad positions (causal: real ones never
    # look ahead at it), so every real target position must agree.
    real = target_mask.bool()
    torch.testing.assert_close(logits[real], expected[real], rtol=1e-5, atol=1e-5)
    assert logits.std() > 0.5 and (logits[0] - logits[1]).abs().max() > 0.1  # not degenerate


def test_the_reference_tells_apart_what_parity_checks():
    # Guards the parity test: each of these mistakes must move the logits.
    torch.manual_seed(0)
    ours = perturb_(Transformer(CONFIG))
    source, source_mask, target, target_mask = padded_batch()
    real = target_mask.bool()
    with torch.no_grad():
        expected = ReferenceModel(ours).eval()(source, source_mask, target, target_mask)[real]
        unmasked_source = ours(source, torch.ones_like(source_mask), decoder_input_ids=target)[0][real]
        swapped = Transformer(CONFIG).eval()
        state = ours.state_dict()
        swapped.load_state_dict({name: state[name.replace("blocks.0.", "blocks.1.")] if "encoder.blocks.0." in name
                                 else state[name.replace("blocks.1.", "blocks.0.")] if "encoder.blocks.1." in name
                                 else state[name] for name in state})
        swapped_layers = swapped(source, source_mask, decoder_input_ids=target)[0][real]
    for wrong in (unmasked_source, swapped_layers):
        assert (wrong - expected).abs().max() > 1e-3


def test_sinusoids_follow_the_paper_formula_for_any_length():
    pe = sinusoidal_positions(torch.arange(600), 32)  # longer than any row the tests train on
    # fp32 angles of up to 600 radians carry ~600 * 6e-8 of rounding in either formula
    torch.testing.assert_close(pe, tutorial_positional_encoding(600, 32), rtol=0, atol=1e-4)
    pos, i = 37, 5  # PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(...)
    assert pe[pos, 2 * i].item() == pytest.approx(math.sin(pos / 10000 ** (2 * i / 32)), abs=1e-6)
    assert pe[pos, 2 * i + 1].item() == pytest.approx(math.cos(pos / 10000 ** (2 * i / 32)), abs=1e-6)
    assert sinusoidal_positions(torch.arange(4), 7).shape == (4, 7)  # an odd width drops the last cosine
    assert not list(Transformer(CONFIG).named_buffers())  # computed, never stored


def test_one_embedding_for_source_target_and_output_and_no_final_norms():
    model = Transformer(CONFIG)
    assert model.lm_head.weight is model.shared.weight
    names = [name for name, _ in model.named_parameters()]
    assert "lm_head.weight" not in names and sum("shared" in name for name in names) == 1
    assert not any("final_norm" in name or "position" in name for name in names)
    # nn.Transformer (with the final norms swapped out) has exactly our block parameters
    reference = reference_transformer(CONFIG)
    assert model.num_parameters() == sum(p.numel() for p in reference.parameters()) + VOCAB * 32
    # post-LN: a block's output is a LayerNorm's (zero mean, unit variance per position)
    with torch.no_grad():
        memory = model.eval().encode(*padded_batch()[:2])
    torch.testing.assert_close(memory.mean(-1), torch.zeros(memory.shape[:2]), rtol=0, atol=1e-5)
