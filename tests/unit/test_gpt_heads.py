"""Sequence classification / regression head on GPT: pooling the last real token."""

from __future__ import annotations

import pytest
import torch

from stages.models import GPT, GPTConfig, GPTForSequenceClassification
from stages.models.heads import last_token_index

CONFIG = GPTConfig(vocab_size=61, max_seq_len=16, num_layers=2, hidden_size=32, num_heads=4)


def classifier(num_labels: int = 3) -> GPTForSequenceClassification:
    torch.manual_seed(0)
    return GPTForSequenceClassification(GPT(CONFIG), num_labels=num_labels).eval()


def test_last_token_index_for_right_left_and_no_padding():
    mask = torch.tensor([[1, 1, 1, 0, 0], [0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
    assert last_token_index(torch.zeros(3, 5), mask).tolist() == [2, 4, 4]
    assert last_token_index(torch.zeros(2, 5), None).tolist() == [4, 4]


def test_right_padded_batch_gives_the_same_logits_as_each_sequence_alone():
    model = classifier()
    short = torch.tensor([[5, 9, 2, 7]])
    long = torch.tensor([[4, 4, 8, 1, 3, 6, 2]])
    batch = torch.tensor([[5, 9, 2, 7, 0, 0, 0], [4, 4, 8, 1, 3, 6, 2]])
    mask = torch.tensor([[1, 1, 1, 1, 0, 0, 0], [1] * 7])
    with torch.no_grad():
        batched, _ = model(batch, attention_mask=mask)
        alone_short, _ = model(short, attention_mask=torch.ones_like(short))
        alone_long, _ = model(long)
    torch.testing.assert_close(batched[0], alone_short[0], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(batched[1], alone_long[0], rtol=1e-5, atol=1e-5)


def test_pad_token_ids_do_not_matter():
    model = classifier()
    mask = torch.tensor([[1, 1, 1, 0, 0]])
    with torch.no_grad():
        a, _ = model(torch.tensor([[5, 9, 2, 0, 0]]), attention_mask=mask)
        b, _ = model(torch.tensor([[5, 9, 2, 33, 12]]), attention_mask=mask)
    torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)


def test_classification_loss_is_cross_entropy_and_trains_the_backbone():
    model = classifier(num_labels=3).train()
    ids = torch.randint(0, 61, (4, 6))
    labels = torch.tensor([0, 2, 1, 2])
    logits, loss = model(ids, torch.ones_like(ids), labels)
    assert logits.shape == (4, 3)
    torch.testing.assert_close(loss, torch.nn.functional.cross_entropy(logits, labels))
    loss.backward()
    assert model.backbone.blocks[0].attn.qkv_proj.weight.grad is not None


def test_one_label_means_regression_with_mse():
    model = classifier(num_labels=1)
    ids = torch.randint(0, 61, (3, 6))
    targets = torch.tensor([0.5, 3.0, 4.2])
    logits, loss = model(ids, torch.ones_like(ids), targets)
    assert logits.shape == (3, 1)
    torch.testing.assert_close(loss, torch.nn.functional.mse_loss(logits.squeeze(-1), targets))


def test_zero_labels_is_rejected():
    with pytest.raises(ValueError, match="num_labels"):
        GPTForSequenceClassification(GPT(CONFIG), num_labels=0)
