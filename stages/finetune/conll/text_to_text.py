"""CoNLL-2003 named entities as text to text.

Format (source -> target), one sentence per example:

    "ner: EU rejects German call to boycott British lamb ."
        -> "EU [ORG] ; German [MISC] ; British [MISC]"
    "ner: Peter Blackburn"   -> "Peter Blackburn [PER]"
    "ner: The lamb ."        -> "none"

The target lists the sentence's entities in sentence order, each as its words joined
by a space and its type in brackets (PER, ORG, LOC, MISC), separated by " ; "; a
sentence without entities has the target "none".

Reading a generation back (`parse_entities`): split at each ";" word (or read "none" /
an empty text as no entities); a piece that does not end with a known "[TYPE]" after at
least one word is malformed and dropped. Each remaining entity's words are looked up in the sentence
left to right: the first occurrence that starts after the previous matched entity
(so entities in sentence order, a repeated word is taken at its next occurrence); an
entity whose words do not occur there is unmatched and dropped. The matched entities
become IOB2 tags (B- on the first word, I- on the rest, O elsewhere), which are scored
by the token-head path's code (seqeval, conlleval rules) and written in conlleval's
format. The dev / test scores report `malformed_pieces` and `unmatched_entities`.

Limits: a word ";" inside an entity, or an entity that is a "[TYPE]" itself, cannot
be written in this format; the sentence is cut at finetune.max_seq_len tokens (words
past the cut can still be named, but the model never saw them); targets longer than
MAX_TARGET_LEN tokens lose their last entities.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import partial

import numpy as np
from tokenizers import Tokenizer

from stages.finetune.conll.reader import ENTITY_TYPES, ConllSentences
from stages.finetune.encode import EncodedSplit
from stages.finetune.prepared import PreparedTask
from stages.finetune.text_to_text.pairs import encode_pairs, generated_texts

MAX_TARGET_LEN = 64  # target tokens, </s> included: CoNLL-2003 sentences have at most ~20 entities
SOURCE_PREFIX = "ner: "
NO_ENTITIES = "none"
SEPARATOR = " ; "
_SEPARATOR = re.compile(r"\s+;(?=\s|$)")  # a ";" word: one inside a word (rare) does not split
_PIECE = re.compile(r"^(?P<words>.*\S)\s*\[(?P<type>[A-Z]+)\]$")


@dataclass(frozen=True)
class Entity:
    start: int  # first word
    end: int  # one past the last word
    type: str


@dataclass
class ParseCounts:
    malformed_pieces: int = 0  # pieces without a known [TYPE] at the end
    unmatched_entities: int = 0  # well-formed entities whose words are not in the sentence (in order)


def ner_source(words: list[str]) -> str:
    return SOURCE_PREFIX + " ".join(words)


def entities_from_tags(tags: list[str]) -> list[Entity]:
    """IOB2 tags -> entities in sentence order (an I- without its B- starts one, as conlleval does)."""
    entities: list[Entity] = []
    start, kind = None, None
    for i, tag in enumerate([*tags, "O"]):
        continues = tag.startswith("I-") and kind == tag[2:]
        if start is not None and not continues:
            entities.append(Entity(start, i, kind))
            start, kind = None, None
        if tag != "O" and not continues:
            start, kind = i, tag[2:]
    return entities


def ner_target(words: list[str], tags: list[str]) -> str:
    entities = entities_from_tags(tags)
    if not entities:
        return NO_ENTITIES
    return SEPARATOR.join(f"{' '.join(words[e.start:e.end])} [{e.type}]" for e in entities)


def parse_entities(text: str, words: list[str]) -> tuple[list[Entity], ParseCounts]:
    """A generated target -> entities over `words` (see the module docstring)."""
    counts = ParseCounts()
    text = text.strip()
    if text in ("", NO_ENTITIES):
        return [], counts
    entities: list[Entity] = []
    cursor = 0  # entities come in sentence order: search after the previous one
    for piece in _SEPARATOR.split(text):
        if not piece.strip():  # a trailing separator
            continue
        match = _PIECE.match(piece.strip())
        if match is None or match["type"] not in ENTITY_TYPES:
            counts.malformed_pieces += 1
            continue
        entity_words = match["words"].split()
        start = _find(words, entity_words, cursor)
        if start is None:
            counts.unmatched_entities += 1
            continue
        entities.append(Entity(start, start + len(entity_words), match["type"]))
        cursor = start + len(entity_words)
    return entities, counts


def tags_from_entities(entities: list[Entity], num_words: int) -> list[str]:
    tags = ["O"] * num_words
    for e in entities:
        tags[e.start] = f"B-{e.type}"
        tags[e.start + 1:e.end] = [f"I-{e.type}"] * (e.end - e.start - 1)
    return tags


def parse_tags(text: str, words: list[str]) -> tuple[list[str], ParseCounts]:
    """A generated target -> (IOB2 tag per word, what was dropped)."""
    entities, counts = parse_entities(text, words)
    return tags_from_entities(entities, len(words)), counts


def _find(words: list[str], needle: list[str], cursor: int) -> int | None:
    for start in range(cursor, len(words) - len(needle) + 1):
        if words[start:start + len(needle)] == needle:
            return start
    return None


def encode_ner(tokenizer: Tokenizer, sentences: ConllSentences) -> EncodedSplit:
    targets = [ner_target(words, tags) for words, tags in zip(sentences.words, sentences.tags)]
    return encode_pairs(tokenizer, [ner_source(words) for words in sentences.words], targets, MAX_TARGET_LEN)


def generated_tags(words: list[list[str]], tokenizer_path: str, outputs: np.ndarray,
                   ) -> tuple[list[list[str]], ParseCounts]:
    """Generated ids (N, MAX_TARGET_LEN) -> (tags per sentence, dropped pieces summed)."""
    total = ParseCounts()
    tags = []
    for sentence, text in zip(words, generated_texts(tokenizer_path, outputs)):
        sentence_tags, counts = parse_tags(text, sentence)
        tags.append(sentence_tags)
        total.malformed_pieces += counts.malformed_pieces
        total.unmatched_entities += counts.unmatched_entities
    return tags, total


def word_tags(words: list[list[str]], tokenizer_path: str, outputs: np.ndarray) -> list[list[str]]:
    return generated_tags(words, tokenizer_path, outputs)[0]


def ner_text_scores(words: list[list[str]], gold_tags: list[list[str]], tokenizer_path: str,
                    outputs: np.ndarray) -> dict[str, float]:
    """Entity-level scores of the parsed generations (seqeval, conlleval rules) and the
    counts of what could not be read back."""
    from stages.finetune.conll.evaluate import entity_scores

    tags, counts = generated_tags(words, tokenizer_path, outputs)
    return {**entity_scores(gold_tags, tags), "malformed_pieces": counts.malformed_pieces,
            "unmatched_entities": counts.unmatched_entities}


def prepare_ner_text(tokenizer: Tokenizer, tokenizer_path: str, sentences: dict[str, ConllSentences],
                     ) -> PreparedTask:
    """sentences: "train", "dev", "test" (all with gold tags); predictors: split ->
    (outputs -> tags per sentence). data: {"sentences"}."""
    scored = ("dev", "test")
    return PreparedTask(
        encoded={split: encode_ner(tokenizer, batch) for split, batch in sentences.items()},
        scorers={split: partial(ner_text_scores, sentences[split].words, sentences[split].tags, tokenizer_path)
                 for split in scored},
        predictors={split: partial(word_tags, sentences[split].words, tokenizer_path) for split in scored},
        predict_splits=scored,
        data={"sentences": sentences},
        description=f"{len(sentences['train'])} train, {len(sentences['dev'])} dev, "
                    f"{len(sentences['test'])} test sentences, as text to text")
