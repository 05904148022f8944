"""The pretraining objectives on hand-made batches: which positions count, -100 is
skipped, label smoothing, each objective's loss is the plain cross-entropy of its model's
logits (the models compute no pretraining loss of their own; T5's fine-tuning loss is the
same number), and the dataset's objective must match the model family."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F

from stages.data.masking import IGNORE_INDEX
from stages.models import BertConfig, BertForPreTraining, GPT, GPTConfig, T5, T5Config
from stages.objectives.clm.loss import CausalLM
from stages.objectives.mlm.loss import MaskedLM
from stages.objectives.output import LOSS_SUM, NUM_CORRECT, NUM_PREDICTIONS, prediction_loss
from stages.objectives.registry import build_objective
from stages.objectives.span.loss import SpanCorruption
from stages.pretrain.run import read_dataset_index

V = 11


def test_accuracy_counts_only_positions_with_a_target():
    logits = torch.full((4, 3), -5.0)
    logits[0, 1] = logits[1, 2] = logits[2, 0] = logits[3, 0] = 5.0  # predicts 1, 2, 0, 0
    targets = torch.tensor([1, 0, IGNORE_INDEX, IGNORE_INDEX])  # right, wrong, then two skipped
    loss, stats = prediction_loss(logits, targets)
    assert stats[NUM_PREDICTIONS] == 2 and stats[NUM_CORRECT] == 1
    assert loss.item() == pytest.approx(F.cross_entropy(logits[:2], targets[:2]).item())
    assert stats[LOSS_SUM] == pytest.approx(2 * loss.item())


def test_no_targets_at_all_gives_zero_loss_not_nan():
    loss, stats = prediction_loss(torch.randn(3, V, requires_grad=True), torch.full((3,), IGNORE_INDEX))
    assert loss.item() == 0.0 and stats.tolist() == [0.0, 0.0, 0.0]
    loss.backward()  # still differentiable: a micro batch without masks must not break backward


def test_label_smoothing_mixes_in_the_uniform_cross_entropy():
    torch.manual_seed(0)
    logits, targets = torch.randn(6, V), torch.randint(0, V, (6,))
    targets[2] = IGNORE_INDEX
    keep = targets != IGNORE_INDEX
    log_probs = logits[keep].log_softmax(-1)
    nll = -log_probs.gather(1, targets[keep, None]).mean()
    uniform = -log_probs.mean()
    smoothed, _ = prediction_loss(logits, targets, label_smoothing=0.2)
    assert smoothed.item() == pytest.approx((0.8 * nll + 0.2 * uniform).item(), rel=1e-6)
    # A confident, correct prediction costs more with smoothing.
    confident = torch.full((1, V), -10.0)
    confident[0, 3] = 10.0
    plain, _ = prediction_loss(confident, torch.tensor([3]))
    assert prediction_loss(confident, torch.tensor([3]), label_smoothing=0.1)[0] > plain + 1.0


def test_clm_scores_every_next_token_with_the_shifted_cross_entropy():
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=V, max_seq_len=8, num_layers=1, hidden_size=16, num_heads=2)).eval()
    input_ids = torch.randint(0, V, (3, 8))
    objective = CausalLM(seq_len=8)
    out = objective(model, {"input_ids": input_ids})
    assert set(out.parts) == {"clm"} and out.parts["clm"][NUM_PREDICTIONS] == 3 * 7
    expected = F.cross_entropy(model(input_ids)[:, :-1].flatten(0, 1), input_ids[:, 1:].flatten())
    assert out.loss.item() == pytest.approx(expected.item(), rel=1e-6)
    assert objective.flops_per_sample(model) == model.flops_per_token(8) * 8


def bert_batch(with_pair_label: bool) -> dict[str, torch.Tensor]:
    torch.manual_seed(1)
    input_ids = torch.randint(5, V, (2, 6))
    labels = torch.full((2, 6), IGNORE_INDEX)
    labels[0, 1], labels[0, 4], labels[1, 2] = 7, 8, 9  # three masked positions
    batch = {"input_ids": input_ids, "labels": labels,
             "attention_mask": torch.tensor([[1] * 6, [1] * 4 + [0] * 2]),
             "token_type_ids": torch.tensor([[0, 0, 0, 1, 1, 1], [0, 0, 1, 1, 0, 0]])}
    if with_pair_label:
        batch["next_sentence_label"] = torch.tensor([0, 1])
    return batch


@pytest.mark.parametrize("task", ["nsp", "sop"])
def test_mlm_with_a_sentence_task_is_the_bert_pretraining_loss(task):
    torch.manual_seed(0)
    model = BertForPreTraining(BertConfig(vocab_size=V, max_seq_len=8, num_layers=1, hidden_size=16,
                                          num_heads=2, dropout=0.0)).eval()
    batch = bert_batch(with_pair_label=True)
    out = MaskedLM(seq_len=6, sentence_task=task)(model, batch)
    assert set(out.parts) == {"mlm", task}
    assert out.parts["mlm"][NUM_PREDICTIONS] == 3 and out.parts[task][NUM_PREDICTIONS] == 2
    mlm_logits, pair_logits = model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
    expected = (F.cross_entropy(mlm_logits.flatten(0, 1), batch["labels"].flatten())
                + F.cross_entropy(pair_logits, batch["next_sentence_label"]))
    assert out.loss.item() == pytest.approx(expected.item(), rel=1e-6)


def test_mlm_only_has_no_sentence_part():
    torch.manual_seed(0)
    model = BertForPreTraining(BertConfig(vocab_size=V, max_seq_len=8, num_layers=1, hidden_size=16,
                                          num_heads=2, dropout=0.0)).eval()
    batch = bert_batch(with_pair_label=False)
    out = MaskedLM(seq_len=6, sentence_task="none")(model, batch)
    assert set(out.parts) == {"mlm"}
    mlm_logits, _ = model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
    expected = F.cross_entropy(mlm_logits.flatten(0, 1), batch["labels"].flatten())
    assert out.loss.item() == pytest.approx(expected.item(), rel=1e-6)


def test_span_scores_the_targets_and_matches_the_t5_loss():
    torch.manual_seed(0)
    model = T5(T5Config(vocab_size=V, hidden_size=16, head_size=8, ff_size=32, num_layers=1, num_heads=2,
                        dropout=0.0)).eval()
    input_ids, labels = torch.randint(2, V, (2, 7)), torch.randint(2, V, (2, 4))
    labels[1, 3] = IGNORE_INDEX
    batch = {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids), "labels": labels,
             "decoder_input_ids": model.shift_right(labels)}
    objective = SpanCorruption(seq_len=7, targets_length=4)
    out = objective(model, batch)
    assert set(out.parts) == {"span"} and out.parts["span"][NUM_PREDICTIONS] == 7
    expected = model(input_ids, batch["attention_mask"], labels=labels)[1]
    assert out.loss.item() == pytest.approx(expected.item(), rel=1e-6)
    assert objective.tokens_per_sample == 11
    assert objective.flops_per_sample(model) == model.flops_per_example(7, 4)


def test_the_dataset_index_picks_the_objective():
    assert isinstance(build_objective({"objective": "clm", "seq_len": 8}, "gpt"), CausalLM)
    mlm = build_objective({"objective": "mlm", "seq_len": 8, "mlm": {"sentence_task": "sop"}}, "bert")
    assert isinstance(mlm, MaskedLM) and mlm.parts == ("mlm", "sop")
    span = build_objective({"objective": "span", "seq_len": 8, "span": {"targets_length": 3}}, "t5")
    assert isinstance(span, SpanCorruption) and span.tokens_per_sample == 11


@pytest.mark.parametrize(("objective", "family", "fix"), [
    ("clm", "bert", "set dataset.objective: mlm or pretrain.model.family: gpt"),
    ("mlm", "t5", "set dataset.objective: span or pretrain.model.family: bert"),
    ("span", "gpt", "set dataset.objective: clm or pretrain.model.family: t5"),
])
def test_an_objective_the_family_does_not_train_is_refused_naming_both_keys(tmp_path, objective, family, fix):
    split = {"rows": 4, "shards": []}
    (tmp_path / "index.json").write_text(json.dumps(
        {"objective": objective, "seq_len": 8, "splits": {"train": split, "validation": split}}))
    with pytest.raises(ValueError, match=rf"index.json: dataset.objective is '{objective}', but "
                                         rf"pretrain.model.family '{family}'.*{fix}"):
        read_dataset_index(tmp_path, family)
