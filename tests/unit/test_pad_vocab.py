"""pretrain.model.pad_vocab_to_multiple_of: the embedding and LM head get rows up to the
multiple (GPU matrix kernels are much faster at such sizes), which no token and no target
ever uses; the model still loads wherever the tokenizer's vocabulary fits in it."""

from __future__ import annotations

import torch

from stages.models.build import load_pretrained, padded_vocab_size, save_pretrained
from stages.pretrain.train_loop import _build_model
from tests.unit.test_pretrain_job import make_job
from tests.support.pretraining_loss import causal_lm_loss


def test_rounding_up():
    assert padded_vocab_size(50257, 64) == 50304
    assert padded_vocab_size(50257, 128) == 50304
    assert padded_vocab_size(8192, 128) == 8192
    assert padded_vocab_size(1000, 1) == 1000


def test_the_pretraining_model_gets_the_padded_rows_and_keeps_them_through_save_and_load(tmp_path):
    job = make_job(tmp_path, {"model": {"family": "gpt", "num_layers": 1, "hidden_size": 32, "num_heads": 2,
                                        "pad_vocab_to_multiple_of": 64}}, vocab_size=1000, seq_len=16)
    model = _build_model(job)
    assert model.config.vocab_size == 1024 and model.token_embedding.weight.shape[0] == 1024
    ids = torch.randint(0, 1000, (2, 16))
    logits = model(ids)
    loss = causal_lm_loss(logits, ids)
    assert logits.shape[-1] == 1024 and torch.isfinite(loss)
    loaded = load_pretrained(save_pretrained(model, tmp_path / "model"))
    assert loaded.config.vocab_size == 1024
    unpadded = make_job(tmp_path, {"model": {"family": "gpt", "num_layers": 1, "hidden_size": 32, "num_heads": 2}},
                        vocab_size=1000, seq_len=16)
    assert _build_model(unpadded).config.vocab_size == 1000
