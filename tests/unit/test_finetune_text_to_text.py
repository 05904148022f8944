"""T5 fine-tuning as text to text (no Ray): sources with the task prefix, label words as
targets, generated ids back to classes, and the model that trains by teacher forcing and
predicts by greedy decoding."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from stages.finetune.encode import load_task_tokenizer
from stages.finetune.model_source import build_task_model
from stages.finetune.tasks import get_task
from stages.finetune.tasks.tsv import read_split
from stages.finetune.text_to_text import (
    MAX_TARGET_LEN, TextToTextModel, class_ids, encode_text_to_text, file_predictions, label_words,
    text_to_text_scores,
)
from stages.models import build_model
from stages.tokenizer.config import TokenizerConfig
from stages.tokenizer.recipes import build_recipe, build_tokenizer, finish_tokenizer


@pytest.fixture(scope="module")
def t5_tokenizer_path(tmp_path_factory, data_dir):
    """The pipeline's T5 tokenizer (Unigram, </s> appended), trained on SST-2 sentences."""
    recipe = build_recipe(TokenizerConfig(kind="unigram", vocab_size=600, min_frequency=1))
    tokenizer = build_tokenizer(recipe)
    sentences = [t[0] for t in read_split(get_task("sst2"), data_dir, "train").texts[:2000]]
    tokenizer.train_from_iterator(sentences + ["negative positive sst2 sentence:"] * 20, trainer=recipe.trainer)
    path = tmp_path_factory.mktemp("t5tok") / "tokenizer.json"
    finish_tokenizer(tokenizer, recipe).save(str(path))
    return str(path)


def test_sources_carry_the_task_prefix_and_targets_the_label_words(t5_tokenizer_path):
    tokenizer = load_task_tokenizer(t5_tokenizer_path, 32)
    spec = get_task("sst2")
    encoded = encode_text_to_text(tokenizer, spec, [("a fine film",), ("dull",)], np.array([1, 0]))
    assert tokenizer.decode(encoded.input_ids[0].tolist()).startswith("sst2 sentence: a fine film")
    assert encoded.input_ids.shape == (2, 32) and encoded.attention_mask[0].sum() < 32
    eos = tokenizer.token_to_id("</s>")
    assert encoded.input_ids[0][encoded.attention_mask[0].sum() - 1] == eos
    assert encoded.labels.shape == (2, MAX_TARGET_LEN)
    words = [tokenizer.decode([t for t in row if t >= 0]) for row in encoded.labels]
    assert words == ["positive", "negative"]
    assert all(eos in row for row in encoded.labels)  # the target ends with </s>


def test_generated_words_become_classes_and_anything_else_is_wrong(t5_tokenizer_path):
    tokenizer = load_task_tokenizer(t5_tokenizer_path, 32)
    spec = get_task("sst2")
    targets = encode_text_to_text(tokenizer, spec, [("x",)] * 3, np.array([0, 1, 1])).labels
    outputs = np.where(targets < 0, -1, targets).astype(np.float32)
    outputs[2] = -1
    outputs[2, :2] = tokenizer.encode("dull").ids[:2]  # not a label word
    assert class_ids(spec, t5_tokenizer_path, outputs).tolist() == [0, 1, -1]
    assert file_predictions(spec, t5_tokenizer_path, outputs).tolist() == [0, 1, 0]
    assert text_to_text_scores(spec, t5_tokenizer_path, np.array([0, 1, 1]), outputs) == {"accuracy": 2 / 3}


def test_word_labels_are_their_own_words_and_regression_is_refused():
    assert label_words(get_task("rte")) == ("entailment", "not_entailment")
    assert label_words(get_task("cola")) == ("unacceptable", "acceptable")
    with pytest.raises(ValueError, match="stsb: a T5 model fine-tunes GLUE classification tasks only"):
        label_words(get_task("stsb"))
    with pytest.raises(ValueError, match="conll2003"):
        label_words(get_task("conll2003"))


def test_the_model_learns_by_teacher_forcing_and_predicts_by_greedy_decoding():
    torch.manual_seed(0)
    t5 = build_model({"family": "t5", "num_layers": 1, "hidden_size": 32, "num_heads": 2, "ff_size": 64},
                     vocab_size=100)
    model = build_task_model({"head": "sequence_classification", "num_labels": 2}, t5)
    assert isinstance(model, TextToTextModel)
    input_ids = torch.randint(3, 100, (4, 8))
    labels = torch.tensor([[5, 1, -100, -100]] * 2 + [[7, 8, 1, -100]] * 2)
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-2)
    first = None
    for _ in range(20):
        _, loss = model(input_ids, torch.ones_like(input_ids), labels=labels)
        first = first if first is not None else loss.item()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    assert loss.item() < first / 4
    model.eval()
    with torch.no_grad():
        generated, none = model(input_ids, torch.ones_like(input_ids))
    assert none is None and generated.shape == (4, MAX_TARGET_LEN)
    assert generated[0, :2].tolist() == [5, 1] and (generated[0, 2:] == -1).all()  # nothing after </s>
    assert generated[2, :3].tolist() == [7, 8, 1]
    with pytest.raises(ValueError, match="no span_extraction head"):
        build_task_model({"head": "span_extraction"}, t5)
