"""BERT: bidirectional attention, padding, token types, pre-training losses, and the task
heads (sequence classification / regression, span extraction, token classification) on
BERT and GPT. CPU, tiny configs."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from stages.models import (
    GPT,
    Bert,
    BertConfig,
    BertForPreTraining,
    BertForSequenceClassification,
    GPTConfig,
    SpanExtractionModel,
    TokenClassificationModel,
)
from tests.support.pretraining_loss import bert_pretraining_loss

CONFIG = BertConfig(vocab_size=97, max_seq_len=16, num_layers=2, hidden_size=32, num_heads=4, dropout=0.0)


def tiny_bert(seed: int = 0) -> BertForPreTraining:
    torch.manual_seed(seed)
    return BertForPreTraining(CONFIG).eval()


def random_ids(batch: int = 2, seq_len: int = 10, seed: int = 1) -> torch.Tensor:
    return torch.randint(1, CONFIG.vocab_size, (batch, seq_len), generator=torch.Generator().manual_seed(seed))


def test_every_position_sees_the_future():
    model = tiny_bert()
    ids = random_ids()
    changed = ids.clone()
    changed[:, -1] = (changed[:, -1] + 1) % CONFIG.vocab_size
    with torch.no_grad():
        a = model.backbone.hidden_states(ids)
        b = model.backbone.hidden_states(changed)
    assert not torch.allclose(a[:, 0], b[:, 0])  # bidirectional: position 0 reads the last token


def test_padding_does_not_change_real_token_outputs():
    model = tiny_bert()
    ids = random_ids(batch=1, seq_len=7)
    padded = torch.cat([ids, torch.zeros(1, 5, dtype=torch.long)], dim=1)
    mask = torch.tensor([[1] * 7 + [0] * 5])
    with torch.no_grad():
        alone, alone_pooled = model.backbone(ids)
        batched, batched_pooled = model.backbone(padded, attention_mask=mask)
    torch.testing.assert_close(batched[:, :7], alone, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(batched_pooled, alone_pooled, rtol=1e-5, atol=1e-5)


def test_token_type_ids_change_the_output_and_default_to_segment_a():
    model = tiny_bert()
    ids = random_ids()
    segments = torch.zeros_like(ids)
    segments[:, 5:] = 1
    with torch.no_grad():
        default = model.backbone.hidden_states(ids)
        zeros = model.backbone.hidden_states(ids, token_type_ids=torch.zeros_like(ids))
        two_segments = model.backbone.hidden_states(ids, token_type_ids=segments)
    torch.testing.assert_close(default, zeros, rtol=0, atol=0)
    assert not torch.allclose(default, two_segments)


def test_pretraining_loss_is_mlm_plus_nsp_and_the_decoder_is_tied():
    model = tiny_bert()
    assert model.mlm_decoder.weight is model.backbone.embeddings.word_embedding.weight
    ids = random_ids()
    labels = torch.full_like(ids, -100)
    labels[:, [2, 5]] = ids[:, [2, 5]]
    nsp_label = torch.tensor([0, 1])
    mlm_logits, nsp_logits = model(ids)
    loss = bert_pretraining_loss(mlm_logits, nsp_logits, labels, nsp_label)
    assert mlm_logits.shape == (2, 10, CONFIG.vocab_size) and nsp_logits.shape == (2, 2)
    expected = F.cross_entropy(mlm_logits[:, [2, 5]].reshape(-1, CONFIG.vocab_size), ids[:, [2, 5]].reshape(-1))
    expected = expected + F.cross_entropy(nsp_logits, nsp_label)
    torch.testing.assert_close(loss, expected)
    assert loss.item() == pytest.approx(math.log(CONFIG.vocab_size) + math.log(2), rel=0.1)
    loss.backward()
    assert model.backbone.embeddings.word_embedding.weight.grad is not None


def test_parameter_count_matches_a_hand_count():
    V, T, L, C, F_ = CONFIG.vocab_size, CONFIG.max_seq_len, CONFIG.num_layers, CONFIG.hidden_size, CONFIG.intermediate_size
    per_block = (C * 3 * C + 3 * C) + (C * C + C) + 2 * C + (C * F_ + F_) + (F_ * C + C) + 2 * C
    embeddings = V * C + T * C + 2 * C + 2 * C  # word, position, token type (2), LayerNorm
    backbone = embeddings + L * per_block + C * C + C  # + pooler
    heads = (C * C + C) + 2 * C + V + (2 * C + 2)  # transform, LayerNorm, decoder bias, NSP
    model = tiny_bert()
    assert model.backbone.num_parameters() == backbone
    assert model.num_parameters() == backbone + heads
    n = backbone + heads - T * C - 2 * C
    assert model.flops_per_token() == 6 * n + 12 * L * C * T


def test_overfitting_one_mlm_batch_drives_the_loss_down():
    model = tiny_bert().train()
    ids = random_ids(batch=4)
    labels = ids.clone()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    first = bert_pretraining_loss(*model(ids), labels)
    for _ in range(40):
        loss = bert_pretraining_loss(*model(ids), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert loss.item() < 0.25 * first.item()


def test_config_errors_say_what_to_fix():
    with pytest.raises(ValueError, match="num_heads"):
        BertConfig(vocab_size=10, hidden_size=30, num_heads=4)
    with pytest.raises(ValueError, match="max_seq_len=16"):
        tiny_bert()(random_ids(seq_len=17))


@pytest.mark.parametrize("num_labels", [1, 3], ids=["regression", "classification"])
def test_bert_sequence_classification_reads_the_pooled_cls(num_labels):
    torch.manual_seed(0)
    model = BertForSequenceClassification(Bert(CONFIG), num_labels=num_labels).eval()
    ids = random_ids()
    mask = torch.ones_like(ids)
    mask[0, 6:] = 0
    labels = torch.tensor([0.5, -1.0]) if num_labels == 1 else torch.tensor([2, 0])
    logits, loss = model(ids, mask, labels)
    assert logits.shape == (2, num_labels)
    _, pooled = model.backbone(ids, mask)
    torch.testing.assert_close(logits, model.classifier(pooled))
    expected = F.mse_loss(logits.squeeze(-1), labels) if num_labels == 1 else F.cross_entropy(logits, labels)
    torch.testing.assert_close(loss, expected)


def backbones() -> list[torch.nn.Module]:
    torch.manual_seed(0)
    gpt = GPT(GPTConfig(vocab_size=97, max_seq_len=16, num_layers=2, hidden_size=32, num_heads=4))
    return [Bert(CONFIG), gpt]


@pytest.mark.parametrize("backbone_index", [0, 1], ids=["bert", "gpt"])
def test_span_extraction_gives_start_and_end_logits_and_ignores_out_of_range_answers(backbone_index):
    model = SpanExtractionModel(backbones()[backbone_index]).eval()
    ids = random_ids()
    start_logits, end_logits, loss = model(ids, start_positions=torch.tensor([1, 3]), end_positions=torch.tensor([2, 5]))
    assert start_logits.shape == end_logits.shape == (2, 10)
    expected = 0.5 * (F.cross_entropy(start_logits, torch.tensor([1, 3])) + F.cross_entropy(end_logits, torch.tensor([2, 5])))
    torch.testing.assert_close(loss, expected)
    # An answer truncated away (position >= T) contributes no loss.
    _, _, partial = model(ids, start_positions=torch.tensor([1, 99]), end_positions=torch.tensor([2, 99]))
    only_first = 0.5 * (F.cross_entropy(start_logits[:1], torch.tensor([1])) + F.cross_entropy(end_logits[:1], torch.tensor([2])))
    torch.testing.assert_close(partial, only_first)


@pytest.mark.parametrize("backbone_index", [0, 1], ids=["bert", "gpt"])
def test_token_classification_labels_every_token_and_ignores_minus_100(backbone_index):
    model = TokenClassificationModel(backbones()[backbone_index], num_labels=5).eval()
    ids = random_ids()
    labels = torch.randint(0, 5, ids.shape)
    labels[:, 7:] = -100
    logits, loss = model(ids, labels=labels)
    assert logits.shape == (2, 10, 5)
    torch.testing.assert_close(loss, F.cross_entropy(logits[:, :7].reshape(-1, 5), labels[:, :7].reshape(-1)))


def test_heads_pass_token_type_ids_through_to_bert():
    model = TokenClassificationModel(backbones()[0], num_labels=3).eval()
    ids = random_ids()
    segments = torch.zeros_like(ids)
    segments[:, 4:] = 1
    with torch.no_grad():
        assert not torch.allclose(model(ids)[0], model(ids, token_type_ids=segments)[0])
