"""CoNLL-2003 as text to text (no model): gold tags -> target text -> parsed tags is the
identity, and generations that do not fit the format are dropped and counted."""

from __future__ import annotations

import numpy as np
import pytest

from stages.finetune.conll.reader import ConllSentences
from stages.finetune.conll.text_to_text import (
    MAX_TARGET_LEN, Entity, encode_ner, entities_from_tags, ner_source, ner_target, ner_text_scores, parse_tags,
    word_tags,
)
from stages.finetune.encode import load_task_tokenizer, raw_tokenizer
from stages.tokenizer.config import TokenizerConfig
from stages.tokenizer.recipes import build_recipe, build_tokenizer, finish_tokenizer

SENTENCES = [
    # entity at the start, two of one type, a sentence that ends with "."
    ("EU rejects German call to boycott British lamb .".split(),
     "B-ORG O B-MISC O O O B-MISC O O".split(), "EU [ORG] ; German [MISC] ; British [MISC]"),
    # adjacent entities of the same type
    ("New York Boston and Chicago".split(), "B-LOC I-LOC B-LOC O B-LOC".split(),
     "New York [LOC] ; Boston [LOC] ; Chicago [LOC]"),
    # a repeated word, an entity each time, of different types; an entity at the end
    ("Jordan beat Jordan in Amman".split(), "B-LOC O B-PER O B-LOC".split(),
     "Jordan [LOC] ; Jordan [PER] ; Amman [LOC]"),
    # the same multi-word entity twice
    ("Peter Blackburn met Peter Blackburn".split(), "B-PER I-PER O B-PER I-PER".split(),
     "Peter Blackburn [PER] ; Peter Blackburn [PER]"),
    # no entities
    ("the lamb is fine .".split(), "O O O O O".split(), "none"),
]


@pytest.mark.parametrize("words, tags, target", SENTENCES)
def test_gold_tags_become_the_target_and_parse_back_to_themselves(words, tags, target):
    assert ner_target(words, tags) == target
    parsed, counts = parse_tags(target, words)
    assert parsed == tags and (counts.malformed_pieces, counts.unmatched_entities) == (0, 0)


def test_an_i_tag_without_its_b_starts_an_entity_as_conlleval_reads_it():
    assert entities_from_tags("I-PER I-PER O I-LOC B-LOC".split()) == [
        Entity(0, 2, "PER"), Entity(3, 4, "LOC"), Entity(4, 5, "LOC")]


@pytest.mark.parametrize("generated, tags, malformed, unmatched", [
    ("", "O O O O O O O O O", 0, 0),
    ("none", "O O O O O O O O O", 0, 0),
    ("EU [ORG] ; German", "B-ORG O O O O O O O O", 1, 0),  # no [TYPE]
    ("EU [FOO] ; German [MISC]", "O O B-MISC O O O O O O", 1, 0),  # no such type
    ("[ORG] ; lamb [MISC]", "O O O O O O O B-MISC O", 1, 0),  # no words
    ("Paris [LOC] ; British [MISC]", "O O O O O O B-MISC O O", 0, 1),  # not in the sentence
    ("British [MISC] ; EU [ORG]", "O O O O O O B-MISC O O", 0, 1),  # out of order: EU is before British
    ("EU [ORG] ;", "B-ORG O O O O O O O O", 0, 0),  # a trailing separator is no entity
    ("EU[ORG] ; call to [MISC]", "B-ORG O O B-MISC I-MISC O O O O", 0, 0),  # spacing is forgiven
])
def test_malformed_and_unmatched_pieces_are_dropped_and_counted(generated, tags, malformed, unmatched):
    words = SENTENCES[0][0]
    parsed, counts = parse_tags(generated, words)
    assert parsed == tags.split()
    assert (counts.malformed_pieces, counts.unmatched_entities) == (malformed, unmatched)


def test_a_repeated_word_is_matched_at_its_first_occurrence_after_the_previous_entity():
    # The documented ambiguity: the format names words, not positions.
    words = "Smith told Smith".split()
    assert parse_tags("Smith [PER]", words)[0] == "B-PER O O".split()
    assert parse_tags("Smith [PER] ; Smith [PER]", words)[0] == "B-PER O B-PER".split()


@pytest.fixture(scope="module")
def cased_tokenizer_path(tmp_path_factory):
    recipe = build_recipe(TokenizerConfig(kind="unigram", vocab_size=600, min_frequency=1))
    tokenizer = build_tokenizer(recipe)
    corpus = [ner_source(words) + " " + target for words, _, target in SENTENCES]
    tokenizer.train_from_iterator(corpus * 10 + ["Paris [PER] [LOC] [ORG] [MISC] none ;"] * 10,
                                  trainer=recipe.trainer)
    path = tmp_path_factory.mktemp("ner-tokenizer") / "tokenizer.json"
    finish_tokenizer(tokenizer, recipe).save(str(path))
    return str(path)


def test_targets_encode_and_generated_ids_score_with_the_conlleval_rules(cased_tokenizer_path):
    sentences = ConllSentences([s[0] for s in SENTENCES], [s[1] for s in SENTENCES], list(range(len(SENTENCES))))
    tokenizer = load_task_tokenizer(cased_tokenizer_path, 64)
    encoded = encode_ner(tokenizer, sentences)
    assert tokenizer.decode(encoded.input_ids[0].tolist()) == "ner: EU rejects German call to boycott British lamb ."
    assert encoded.labels.shape == (len(SENTENCES), MAX_TARGET_LEN)
    # Perfect generations (the targets themselves) give perfect scores and nothing dropped.
    outputs = np.where(encoded.labels < 0, -1, encoded.labels).astype(np.float32)
    scores = ner_text_scores(sentences.words, sentences.tags, cased_tokenizer_path, outputs)
    assert scores["f1"] == 1.0 and scores["malformed_pieces"] == 0 and scores["unmatched_entities"] == 0
    assert word_tags(sentences.words, cased_tokenizer_path, outputs) == sentences.tags
    # One generation that names a missing word: recall drops, the entity is counted.
    outputs[0] = -1
    wrong = raw_tokenizer(tokenizer).encode("Paris [LOC]").ids  # no padding
    outputs[0, :len(wrong)] = wrong
    scores = ner_text_scores(sentences.words, sentences.tags, cased_tokenizer_path, outputs)
    assert scores["unmatched_entities"] == 1 and scores["precision"] == 1.0 and scores["recall"] < 1.0
