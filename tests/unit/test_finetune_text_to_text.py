"""T5 fine-tuning as text to text (no Ray): sources with the task prefix, label words and
STS-B scores as targets, generated ids back to classes and scores, and the model that
trains by teacher forcing and predicts by greedy decoding. SQuAD and CoNLL-2003 formats:
test_t5_squad_text.py and test_t5_ner_text.py."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from stages.finetune.encode import load_task_tokenizer
from stages.finetune.families.registry import family_for
from stages.finetune.glue.reader import read_split
from stages.finetune.glue.text_to_text import (
    MAX_TARGET_LEN, class_ids, encode_text_to_text, file_predictions, label_words, parse_score, score_text,
    text_to_text_scores,
)
from stages.finetune.task_family import TaskRequest
from stages.finetune.tasks import get_task
from stages.finetune.tasks import task_names
from stages.finetune.text_to_text.model import TextToTextModel
from stages.models import build_model
from stages.tokenizer.config import TokenizerConfig
from stages.tokenizer.recipes import build_recipe, build_tokenizer, finish_tokenizer
from tests.support.model_sources import folder_source


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
    # Never a label for an unreadable generation: -1 (written <unreadable>), scored as wrong.
    assert file_predictions(spec, t5_tokenizer_path, outputs).tolist() == [0, 1, -1]
    assert text_to_text_scores(spec, t5_tokenizer_path, np.array([0, 1, 1]), outputs) == {
        "accuracy": 2 / 3, "unreadable_predictions": 1}
    # Where the gold label is 0, an unreadable generation is still wrong (it once read as 0).
    assert text_to_text_scores(spec, t5_tokenizer_path, np.array([0, 1, 0]), outputs)["accuracy"] == 2 / 3


def test_word_labels_are_their_own_words_and_only_classification_has_them():
    assert label_words(get_task("rte")) == ("entailment", "not_entailment")
    assert label_words(get_task("cola")) == ("unacceptable", "acceptable")
    with pytest.raises(ValueError, match="stsb: only GLUE classification tasks have label words"):
        label_words(get_task("stsb"))
    with pytest.raises(ValueError, match="conll2003"):
        label_words(get_task("conll2003"))


def test_every_registered_task_has_a_text_to_text_format():
    # (A task kind without a format: tests/unit/test_finetune_families.py.)
    for name in task_names():  # translation and summarization have their own family (seq2seq)
        expected = "seq2seq" if get_task(name).head == "seq2seq" else "text_to_text"
        assert family_for(get_task(name), "t5").name == expected
    t5 = build_model({"family": "t5", "num_layers": 1, "hidden_size": 32, "num_heads": 2, "ff_size": 64},
                     vocab_size=100)
    widths = [family_for(get_task(name), "t5").build_model({"task": name}, t5).max_target_len
              for name in ("sst2", "squad_v2", "conll2003")]
    assert widths == [8, 32, 64]


def test_stsb_targets_are_scores_to_the_nearest_fifth_and_generations_are_read_as_floats(t5_tokenizer_path):
    assert [score_text(s) for s in (3.77, 0.0, 5.0, 2.1, 4.9)] == ["3.8", "0.0", "5.0", "2.0", "4.8"]
    assert [parse_score(t) for t in ("3.8", " 4 ", "4.0.1", "", "nan", "five")] == [3.8, 4.0, None, None, None, None]
    tokenizer = load_task_tokenizer(t5_tokenizer_path, 32)
    spec = get_task("stsb")
    encoded = encode_text_to_text(tokenizer, spec, [("a", "b")] * 3, np.array([3.77, 1.0, 0.4], dtype=np.float32))
    assert tokenizer.decode(encoded.input_ids[0].tolist()).startswith("stsb sentence1: a sentence2: b")
    assert [tokenizer.decode([t for t in row if t >= 0]) for row in encoded.labels] == ["3.8", "1.0", "0.4"]
    outputs = np.where(encoded.labels < 0, -1, encoded.labels).astype(np.float32)
    outputs[2] = -1
    outputs[2, :2] = tokenizer.encode("dull").ids[:2]  # not a number: NaN in the files, scored as 0.0
    predicted = file_predictions(spec, t5_tokenizer_path, outputs)
    assert predicted[:2].tolist() == pytest.approx([3.8, 1.0]) and np.isnan(predicted[2])
    scores = text_to_text_scores(spec, t5_tokenizer_path, np.array([3.9, 1.2, 0.2]), outputs)
    assert scores["unreadable_predictions"] == 1 and scores["pearson"] == pytest.approx(
        float(np.corrcoef([3.8, 1.0, 0.0], [3.9, 1.2, 0.2])[0, 1]), abs=1e-6)


def test_the_model_learns_by_teacher_forcing_and_predicts_by_greedy_decoding():
    torch.manual_seed(0)
    t5 = build_model({"family": "t5", "num_layers": 1, "hidden_size": 32, "num_heads": 2, "ff_size": 64},
                     vocab_size=100)
    model = family_for(get_task("sst2"), "t5").build_model({"head": "sequence_classification", "task": "sst2"}, t5)
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
    # Every head is text to text on a T5, with the task's target length as output width.
    squad_model = family_for(get_task("squad"), "t5").build_model({"head": "span_extraction", "task": "squad"}, t5)
    assert isinstance(squad_model, TextToTextModel) and squad_model.max_target_len == 32


def test_stsb_through_the_glue_task_gives_score_targets_and_float_submissions(t5_tokenizer_path, data_dir, tmp_path):
    from stages.finetune.config import FinetuneConfig
    from stages.finetune.glue.outputs import write_submission

    spec = get_task("stsb")
    cfg = FinetuneConfig(tasks=["stsb"], max_train_examples=8, max_eval_examples=8, max_seq_len=32)
    source = folder_source("/unused/model", "t5", tokenizer=t5_tokenizer_path)
    prepared = family_for(spec, "t5").prepare(TaskRequest(spec, cfg, seed=0, source=source, data_dir=data_dir))
    tokenizer = load_task_tokenizer(t5_tokenizer_path, 32)
    dev = prepared.encoded["dev"]
    targets = [tokenizer.decode([t for t in row if t >= 0]) for row in dev.labels]
    assert targets == [score_text(s) for s in prepared.data["splits"]["dev"].labels]
    assert prepared.encoded["test"].labels is None
    # Perfect generations: the rounded gold scores, as floats, correlate almost perfectly.
    outputs = np.where(dev.labels < 0, -1, dev.labels).astype(np.float32)
    scores = prepared.scorers["dev"](outputs)
    assert scores["pearson"] > 0.99 and scores["unreadable_predictions"] == 0
    predictions = prepared.predictors["dev"](outputs)
    assert predictions.dtype == np.float32 and predictions.tolist() == pytest.approx([float(t) for t in targets])
    test = prepared.data["splits"]["test"]
    path = write_submission(tmp_path, spec, test.sample(8, 0), predictions)
    assert [line.split("\t")[1] for line in path.read_text().splitlines()[1:]] == [f"{float(t):.3f}" for t in targets]
