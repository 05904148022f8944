"""SQuAD as text to text (no model): T5's source format, the first answer (or nothing,
v2.0) as target, generated texts scored by the official EM / F1, and the count of
answers that truncation cut off."""

from __future__ import annotations

import numpy as np
import pytest

from stages.finetune.encode import load_task_tokenizer, raw_tokenizer
from stages.finetune.squad.reader import Answer, SquadExample
from stages.finetune.squad.text_to_text import (
    MAX_TARGET_LEN, answers_cut_off, encode_squad, generated_answers, squad_source, squad_target, squad_text_scores,
)
from stages.tokenizer.config import TokenizerConfig
from stages.tokenizer.recipes import build_recipe, build_tokenizer, finish_tokenizer

CONTEXT = "The Denver Broncos beat the Carolina Panthers in Santa Clara to win Super Bowl 50."
EXAMPLES = [
    SquadExample(id="q1", title="t", question="Who won Super Bowl 50?", context=CONTEXT,
                 answers=[Answer("Denver Broncos", 4), Answer("The Denver Broncos", 0)]),
    SquadExample(id="q2", title="t", question="Where was it played?", context=CONTEXT,
                 answers=[Answer("Santa Clara", 49)]),
    SquadExample(id="q3", title="t", question="Who lost Super Bowl 51?", context=CONTEXT, answers=[],
                 is_impossible=True),  # v2.0: no answer
]


@pytest.fixture(scope="module")
def tokenizer_path(tmp_path_factory):
    recipe = build_recipe(TokenizerConfig(kind="unigram", vocab_size=600, min_frequency=1))
    tokenizer = build_tokenizer(recipe)
    tokenizer.train_from_iterator([squad_source(e) for e in EXAMPLES] * 20, trainer=recipe.trainer)
    path = tmp_path_factory.mktemp("squad-tokenizer") / "tokenizer.json"
    finish_tokenizer(tokenizer, recipe).save(str(path))
    return str(path)


def test_sources_are_question_then_context_and_targets_the_first_answer_or_nothing():
    assert squad_source(EXAMPLES[0]) == f"question: Who won Super Bowl 50? context: {CONTEXT}"
    assert [squad_target(e) for e in EXAMPLES] == ["Denver Broncos", "Santa Clara", ""]


def test_targets_end_with_eos_and_an_unanswerable_question_is_eos_alone(tokenizer_path):
    tokenizer = load_task_tokenizer(tokenizer_path, 96)
    eos = tokenizer.token_to_id("</s>")
    encoded = encode_squad(tokenizer, EXAMPLES)
    assert encoded.labels.shape == (3, MAX_TARGET_LEN)
    assert tokenizer.decode(encoded.input_ids[1].tolist()).startswith("question: Where was it played? context: The")
    assert tokenizer.decode([t for t in encoded.labels[0] if t >= 0]) == "Denver Broncos"
    assert encoded.labels[2, 0] == eos and (encoded.labels[2, 1:] == -100).all()
    # A target longer than MAX_TARGET_LEN is cut, and still ends with </s>.
    long_answer = SquadExample(id="q4", title="t", question="Everything?", context=CONTEXT * 5,
                               answers=[Answer(CONTEXT * 3, 0)])
    labels = encode_squad(tokenizer, [long_answer]).labels[0]
    assert (labels >= 0).all() and labels[-1] == eos


def test_answers_past_the_truncated_source_are_counted(tokenizer_path):
    assert answers_cut_off(load_task_tokenizer(tokenizer_path, 256), EXAMPLES) == 0
    # Cut just after the first answer: the second (later in the context) is gone; q3 has none.
    through_answer = squad_source(EXAMPLES[0])[:len("question: Who won Super Bowl 50? context: The Denver Broncos")]
    kept = sum(load_task_tokenizer(tokenizer_path, 256).encode(through_answer).attention_mask)  # </s> included
    short = load_task_tokenizer(tokenizer_path, kept + 2)
    assert answers_cut_off(short, EXAMPLES[:1]) == 0
    assert answers_cut_off(short, EXAMPLES) == 1


def test_generated_texts_are_the_predictions_and_scored_officially(tokenizer_path):
    tokenizer = load_task_tokenizer(tokenizer_path, 96)
    encoded = encode_squad(tokenizer, EXAMPLES)
    outputs = np.where(encoded.labels < 0, -1, encoded.labels).astype(np.float32)
    assert generated_answers(EXAMPLES, tokenizer_path, outputs) == {"q1": "Denver Broncos", "q2": "Santa Clara",
                                                                    "q3": ""}
    assert squad_text_scores(EXAMPLES, tokenizer_path, outputs, version="2.0") == {"exact_match": 1.0, "f1": 1.0,
                                                                    "empty_predictions": 1}
    # q1 answers "the Denver Broncos" (EM by normalization), q2 nothing (no-answer: wrong here),
    # q3 something (wrong: it has no answer).
    for row, text in ((0, "the Denver Broncos"), (1, ""), (2, "Santa Clara")):
        ids = raw_tokenizer(tokenizer).encode(text).ids  # no padding
        outputs[row] = -1
        outputs[row, :len(ids)] = ids
    scores = squad_text_scores(EXAMPLES, tokenizer_path, outputs, version="2.0")
    assert scores == {"exact_match": pytest.approx(1 / 3), "f1": pytest.approx(1 / 3), "empty_predictions": 1}
