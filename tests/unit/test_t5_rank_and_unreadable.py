"""A T5 on GLUE classification without Ray: finetune.t5_scoring: rank scores each label word
by its log-likelihood (checked against the model's own teacher-forced loss, and learnt
by a tiny random T5), and generations that are no label word are never written as a
label: <unreadable> in dev_predictions.tsv, a warning past max_unreadable_fraction."""

from __future__ import annotations

import csv

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from stages.finetune.config import FinetuneConfig
from stages.finetune.encode import load_task_tokenizer
from stages.finetune.families.registry import family_for
from stages.finetune.glue.examples import TaskExamples
from stages.finetune.glue.family import glue_scores
from stages.finetune.glue.outputs import UNREADABLE, write_dev_predictions, write_submission
from stages.finetune.glue.rank import enable_rank_scoring, label_targets, ranks_labels
from stages.finetune.glue.reader import read_split
from stages.finetune.glue.text_to_text import encode_text_to_text
from stages.finetune.glue.text_to_text import unreadable_facts
from stages.finetune.task_family import TaskRequest
from stages.finetune.tasks import get_task
from stages.finetune.text_to_text.model import label_log_likelihoods
from stages.models import build_model
from stages.tokenizer.config import TokenizerConfig
from stages.tokenizer.recipes import build_recipe, build_tokenizer, finish_tokenizer
from tests.support.model_sources import folder_source


@pytest.fixture(scope="module")
def tokenizer_path(tmp_path_factory, data_dir) -> str:
    recipe = build_recipe(TokenizerConfig(kind="unigram", vocab_size=600, min_frequency=1))
    tokenizer = build_tokenizer(recipe)
    sentences = [t[0] for t in read_split(get_task("sst2"), data_dir, "train").texts[:2000]]
    tokenizer.train_from_iterator(sentences + ["negative positive sst2 sentence:"] * 20, trainer=recipe.trainer)
    path = tmp_path_factory.mktemp("t5tok") / "tokenizer.json"
    finish_tokenizer(tokenizer, recipe).save(str(path))
    return str(path)


def tiny_t5_model(tokenizer_path: str, seed: int = 0):
    torch.manual_seed(seed)
    vocab = load_task_tokenizer(tokenizer_path, 16).get_vocab_size()
    t5 = build_model({"family": "t5", "num_layers": 1, "hidden_size": 32, "num_heads": 2, "ff_size": 64,
                      "dropout": 0.0}, vocab_size=vocab)
    return family_for(get_task("sst2"), "t5").build_model(
        {"head": "sequence_classification", "task": "sst2", "num_labels": 2}, t5)


def prepare_glue(spec, cfg, *, source, data_dir, seed):
    return family_for(spec, source.family).prepare(TaskRequest(spec, cfg, seed, source, data_dir))


def test_label_targets_are_the_label_words_ending_with_eos(tokenizer_path):
    targets = label_targets(get_task("sst2"), tokenizer_path)
    tokenizer = load_task_tokenizer(tokenizer_path, 16)
    assert targets.shape == (2, 8)
    assert [tokenizer.decode([t for t in row if t >= 0]) for row in targets] == ["negative", "positive"]
    eos = tokenizer.token_to_id("</s>")
    assert all(row[row >= 0][-1] == eos for row in targets)
    assert label_targets(get_task("rte"), tokenizer_path).shape == (2, 8)
    assert ranks_labels(get_task("sst2"), "rank") and not ranks_labels(get_task("sst2"), "generate")
    assert not ranks_labels(get_task("stsb"), "rank") and not ranks_labels(get_task("squad"), "rank")


def test_scores_are_the_summed_log_likelihoods_of_each_label_word(tokenizer_path):
    model = tiny_t5_model(tokenizer_path).eval()
    spec = get_task("sst2")
    encoded = encode_text_to_text(load_task_tokenizer(tokenizer_path, 16), spec,
                                  [("a fine film",), ("dull and long",), ("ok",)], None)
    input_ids = torch.from_numpy(encoded.input_ids.astype(np.int64))
    mask = torch.from_numpy(encoded.attention_mask.astype(np.int64))
    targets = torch.from_numpy(label_targets(spec, tokenizer_path))
    with torch.no_grad():
        scores = label_log_likelihoods(model.backbone, input_ids, mask, targets)
        assert scores.shape == (3, 2)
        for row in range(3):
            for label in range(2):
                # The teacher-forced loss of that one pair, summed over the target's tokens.
                logits, _ = model.backbone(input_ids[row:row + 1], mask[row:row + 1], labels=targets[label:label + 1])
                expected = -F.cross_entropy(logits[0], targets[label], ignore_index=-100, reduction="sum")
                assert scores[row, label].item() == pytest.approx(expected.item(), abs=1e-4)
        # The model predicts by ranking once the worker enables it, and never generates then.
        enable_rank_scoring(model, spec, FinetuneConfig(t5_scoring="rank"), tokenizer_path)
        outputs, none = model(input_ids, mask)
    assert none is None and torch.allclose(outputs, scores)
    generating = tiny_t5_model(tokenizer_path)
    enable_rank_scoring(generating, spec, FinetuneConfig(), tokenizer_path)
    assert generating.label_targets is None


def test_a_tiny_random_t5_learns_to_rank_the_right_label_word(tokenizer_path):
    model = tiny_t5_model(tokenizer_path, seed=1)
    spec = get_task("sst2")
    texts = [("a gripping , funny film",), ("dull and lifeless",), ("moving and beautiful",), ("a waste of time",)]
    gold = np.array([1, 0, 1, 0])
    encoded = encode_text_to_text(load_task_tokenizer(tokenizer_path, 16), spec, texts, gold)
    input_ids = torch.from_numpy(encoded.input_ids.astype(np.int64))
    mask = torch.from_numpy(encoded.attention_mask.astype(np.int64))
    enable_rank_scoring(model, spec, FinetuneConfig(t5_scoring="rank"), tokenizer_path)
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-2)
    for _ in range(12):
        _, loss = model(input_ids, mask, labels=torch.from_numpy(encoded.labels))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    model.eval()
    with torch.no_grad():
        outputs, _ = model(input_ids, mask)
    # Scored like a classifier's logits: argmax, the heads' code.
    assert glue_scores(spec, gold, outputs.numpy()) == {"accuracy": 1.0}


def test_rank_scoring_prepares_the_task_like_a_classification_head(tokenizer_path, data_dir):
    spec = get_task("sst2")
    source = folder_source("/unused/model", "t5", tokenizer=tokenizer_path)
    cfg = FinetuneConfig(tasks=["sst2"], max_train_examples=8, max_eval_examples=8, max_seq_len=32,
                         t5_scoring="rank")
    prepared = prepare_glue(spec, cfg, source=source, data_dir=data_dir, seed=0)
    assert prepared.data["generations"] is None and "ranking the label words" in prepared.description
    dev_labels = prepared.data["splits"]["dev"].labels
    outputs = np.eye(2, dtype=np.float32)[dev_labels] - 5.0  # log-likelihoods favouring the gold word
    assert prepared.scorers["dev"](outputs) == {"accuracy": 1.0}
    assert prepared.predictors["dev"](outputs).tolist() == dev_labels.tolist()
    # Generating (the default): outputs are token ids read back as words.
    generating = prepare_glue(spec, FinetuneConfig(tasks=["sst2"], max_train_examples=8, max_eval_examples=8,
                                                   max_seq_len=32), source=source, data_dir=data_dir, seed=0)
    assert generating.data["generations"] is not None


def read_tsv(path):
    with open(path, encoding="utf-8", newline="") as f:
        return list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))


def test_unreadable_generations_are_never_written_as_a_label(tmp_path):
    sst2, stsb = get_task("sst2"), get_task("stsb")
    dev = TaskExamples(texts=[("a",), ("b",), ("c",)], labels=np.array([0, 1, 0]), ids=["0", "1", "2"])
    # Row 2's gold label is 0: an unreadable generation once read as "0" looked right there.
    write_dev_predictions(tmp_path / "dev.tsv", sst2, dev, np.array([1, 1, -1]),
                          generations=["positive", "positive", "pos"])
    assert read_tsv(tmp_path / "dev.tsv") == [["index", "prediction", "label", "generation"],
                                              ["0", "1", "0", "positive"], ["1", "1", "1", "positive"],
                                              ["2", UNREADABLE, "0", "pos"]]
    scores = TaskExamples(texts=[("a", "b")] * 2, labels=np.array([3.8, 1.0]), ids=["0", "1"])
    write_dev_predictions(tmp_path / "stsb.tsv", stsb, scores, np.array([3.8, np.nan], dtype=np.float32))
    assert [row[1] for row in read_tsv(tmp_path / "stsb.tsv")[1:]] == ["3.800", UNREADABLE]
    # The GLUE server needs a label on every row: only the submission file fills one in.
    path = write_submission(tmp_path, sst2, dev, np.array([1, 1, -1]))
    assert [row[1] for row in read_tsv(path)[1:]] == ["1", "1", "0"]


def test_a_warning_when_too_many_generations_are_unreadable():
    spec, cfg = get_task("sst2"), FinetuneConfig(max_unreadable_fraction=0.1)
    all_unreadable = unreadable_facts(spec, cfg, np.full(872, -1), np.full(1821, -1))
    assert all_unreadable["unreadable_fraction"] == 1.0 and all_unreadable["test_unreadable_predictions"] == 1821
    [warning] = all_unreadable["warnings"]
    assert "872 of 872 dev generations (100%) are not a label word (negative, positive)" in warning
    assert "finetune.t5_scoring: rank" in warning and "finetune.max_unreadable_fraction=0.1" in warning
    few = unreadable_facts(spec, cfg, np.array([0] * 95 + [-1] * 5), np.array([1]))
    assert few["unreadable_fraction"] == 0.05 and "warnings" not in few
    stsb = unreadable_facts(get_task("stsb"), cfg, np.array([np.nan, 1.0]), np.array([2.0]))
    assert "are not a number" in stsb["warnings"][0]
