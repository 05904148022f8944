"""The array versions of BERT's pairing, trimming and masking against the reference's
rules, on hand-made windows whose token ids say where they come from."""

from __future__ import annotations

import numpy as np
import pytest

from stages.data.masking import IGNORE_INDEX, MaskingPolicy
from stages.objectives.mlm.sentence_pairs import PairSpans, SentenceWindow, truncate_pairs, window_pairs

MAX_NUM_TOKENS = 61


def reference_truncate(length_a: int, length_b: int, max_num_tokens: int) -> tuple[int, int]:
    """create_pretraining_data.py's truncate_seq_pair, counting only the lengths."""
    while length_a + length_b > max_num_tokens:
        if length_a > length_b:
            length_a -= 1
        else:
            length_b -= 1
    return length_a, length_b


def test_trimming_gives_the_reference_lengths_and_stays_inside_each_side():
    rng = np.random.default_rng(0)
    num = 2000
    a_start = rng.integers(0, 1000, num)
    a_stop = a_start + rng.integers(1, 120, num)
    b_start = rng.integers(0, 1000, num)
    b_stop = b_start + rng.integers(1, 120, num)
    spans = PairSpans(a_start, a_stop, b_start, b_stop, np.zeros(num, dtype=np.int64))
    trimmed = truncate_pairs(spans, MAX_NUM_TOKENS, np.random.default_rng(1))
    assert len(trimmed) == num
    for i in range(num):
        expected = reference_truncate(int(a_stop[i] - a_start[i]), int(b_stop[i] - b_start[i]),
                                      MAX_NUM_TOKENS)
        got = (int(trimmed.a_stop[i] - trimmed.a_start[i]),
               int(trimmed.b_stop[i] - trimmed.b_start[i]))
        assert got == expected
        assert a_start[i] <= trimmed.a_start[i] and trimmed.a_stop[i] <= a_stop[i]
        assert b_start[i] <= trimmed.b_start[i] and trimmed.b_stop[i] <= b_stop[i]
    front = (trimmed.a_start - a_start) + (trimmed.b_start - b_start)
    trimmed_total = (a_stop - a_start) + (b_stop - b_start) - MAX_NUM_TOKENS
    share = front.sum() / np.maximum(trimmed_total, 0).sum()
    assert share == pytest.approx(0.5, abs=0.02)  # front or back at random


def labelled_window(num_documents: int = 60, seed: int = 0) -> SentenceWindow:
    """Token id = document * 100_000 + sentence * 1_000 + position, so that a slice says
    which document and sentences it came from. Empty sentences and documents included:
    the window drops them."""
    rng = np.random.default_rng(seed)
    sentences, per_document = [], []
    for document in range(num_documents):
        count = 0 if document % 17 == 5 else int(rng.integers(1, 15))
        for sentence in range(count):
            length = 0 if sentence == 2 else int(rng.integers(1, 30))
            sentences.append([document * 100_000 + sentence * 1_000 + p for p in range(length)])
        per_document.append(count)
    return SentenceWindow.from_encodings(sentences, per_document)


def test_window_drops_empty_sentences_and_documents():
    window = labelled_window()
    lengths = np.diff(window.sentence_starts)
    assert (lengths > 0).all() and (np.diff(window.document_starts) > 0).all()
    assert window.num_documents == 60 - 4  # documents 5, 22, 39, 56 have no sentence
    documents = window.tokens[window.sentence_starts[window.document_starts[:-1]]] // 100_000
    assert (np.diff(documents) > 0).all()


@pytest.mark.parametrize("task", ["nsp", "sop", "none"])
def test_pairs_follow_the_tasks_rules(task):
    window = labelled_window()
    spans = window_pairs(window, task, MAX_NUM_TOKENS, 0.1, np.random.default_rng(3))
    tokens = window.tokens
    a_length, b_length = spans.a_stop - spans.a_start, spans.b_stop - spans.b_start
    assert (a_length > 0).all() and (a_length + b_length <= MAX_NUM_TOKENS).all()
    assert (np.diff(window.document_starts) > 0).all()
    if task == "none":
        assert (b_length == 0).all() and (spans.label == -1).all()
    else:
        assert (b_length > 0).all()
        assert 0.4 < spans.label.mean() < 0.6
    short = 0
    for a_start, a_stop, b_start, b_stop, label in zip(
            spans.a_start, spans.a_stop, spans.b_start, spans.b_stop, spans.label, strict=True):
        a, b = tokens[a_start:a_stop], tokens[b_start:b_stop]
        assert len(set(a // 100_000)) == 1  # one document, in order
        assert (np.diff(a) > 0).all()
        short += len(a) + len(b) < MAX_NUM_TOKENS // 2
        if task == "none":
            continue
        assert len(set(b // 100_000)) == 1 and (np.diff(b) > 0).all()
        same_document = a[0] // 100_000 == b[0] // 100_000
        if task == "nsp":
            assert same_document == (label == 0)
            if label == 0:
                assert a[-1] < b[0]  # B continues A
        else:
            assert same_document
            assert (a[-1] < b[0]) == (label == 0)  # swapped when labelled 1
    assert short > 0


def policy(word_start: np.ndarray | None = None) -> MaskingPolicy:
    return MaskingPolicy(mask_id=4, special_ids=np.array([0, 1, 2, 3, 4]), vocab_size=300,
                         word_start=word_start)


def padded_rows(rng: np.random.Generator, num_rows: int = 400, seq_len: int = 64) -> np.ndarray:
    """[CLS]=2 tokens [SEP]=3 tokens [SEP] [PAD]=0..., tokens from 5..299."""
    rows = np.zeros((num_rows, seq_len), dtype=np.int64)
    for row in rows:
        n = int(rng.integers(6, seq_len + 1))
        row[:n] = rng.integers(5, 300, n)
        row[0], row[n // 2], row[n - 1] = 2, 3, 3
    return rows


def test_mask_rows_chooses_exactly_the_rounded_share_and_never_a_special_token():
    rng = np.random.default_rng(0)
    rows = padded_rows(rng)
    masked, labels = policy().mask_rows(rows, np.random.default_rng(7))
    maskable = rows >= 5
    chosen = labels != IGNORE_INDEX
    assert not (chosen & ~maskable).any()
    expected = np.maximum(1, [round(0.15 * n) for n in maskable.sum(1)])
    assert (chosen.sum(1) == expected).all()
    assert (labels[chosen] == rows[chosen]).all() and (masked[~chosen] == rows[~chosen]).all()
    assert ((masked[chosen] == 4).mean()) == pytest.approx(0.8, abs=0.03)
    assert (masked[chosen & (masked != 4)] >= 5).all()
    again = policy().mask_rows(rows, np.random.default_rng(7))
    assert (again[0] == masked).all() and (again[1] == labels).all()
    one_row = policy().mask(rows[0], np.random.default_rng(7))
    assert (one_row[1] != IGNORE_INDEX).sum() == expected[0]


@pytest.mark.parametrize("path", ["static", "dynamic"])
def test_both_paths_choose_15_percent_and_send_80_10_10_to_mask_random_unchanged(path):
    # static: mask_rows, the dataset writer's; dynamic: mask_examples, the batch builder's
    # (one generator per example). ~29,000 chosen tokens: the shares' standard errors are
    # under 0.0025, so 0.01 is a four-sigma bound, and the seeds are fixed.
    rows = padded_rows(np.random.default_rng(3), num_rows=3000, seq_len=128)
    if path == "static":
        masked, labels = policy().mask_rows(rows, np.random.default_rng(11))
    else:
        masked, labels = policy().mask_examples(
            rows, [np.random.default_rng([11, 0, example]) for example in range(len(rows))])
    maskable, chosen = rows >= 5, labels != IGNORE_INDEX
    assert not (chosen & ~maskable).any() and (labels[chosen] == rows[chosen]).all()
    assert chosen.sum() / maskable.sum() == pytest.approx(0.15, abs=0.002)  # rounded per row
    got, original = masked[chosen], rows[chosen]
    as_mask, unchanged = (got == 4).mean(), (got == original).mean()
    as_random = ((got != 4) & (got != original)).mean()
    assert as_mask == pytest.approx(0.8, abs=0.01)
    # A random token equals the original 1 time in 295: unchanged gains ~0.0003.
    assert unchanged == pytest.approx(0.1, abs=0.01) and as_random == pytest.approx(0.1, abs=0.01)
    assert (got[got != 4] >= 5).all()  # random tokens are never special


def test_whole_word_masking_is_berts_greedy_pass_over_a_random_word_order():
    word_start = np.ones(300, dtype=bool)
    word_start[150:] = False  # ids 150.. continue the word before them ('##...')
    rows = padded_rows(np.random.default_rng(1))
    masked, labels = policy(word_start).mask_rows(rows, np.random.default_rng(5))
    # The same word order, read from the same first draw, through the reference's loop.
    keys = np.random.default_rng(5).random(rows.shape)
    for row, row_keys, row_labels in zip(rows, keys, labels, strict=True):
        maskable = np.flatnonzero(row >= 5)
        starts = word_start[row[maskable]] | np.concatenate([[True], np.diff(maskable) > 1])
        words = np.split(maskable, np.flatnonzero(starts)[1:])
        num_to_mask = max(1, round(0.15 * len(maskable)))
        expected = []
        for word in np.argsort(row_keys[:len(words)]):
            if len(expected) >= num_to_mask:
                break
            if len(expected) + len(words[word]) > num_to_mask:
                continue
            expected += words[word].tolist()
        assert sorted(expected) == np.flatnonzero(row_labels != IGNORE_INDEX).tolist()


def test_mask_examples_gives_each_row_the_masks_of_its_own_generator():
    rows = padded_rows(np.random.default_rng(2), num_rows=6)
    rngs = [np.random.default_rng([9, 0, example]) for example in range(6)]
    masked, labels = policy().mask_examples(rows, rngs)
    for example in (0, 3, 5):  # alone, with its own generator: the same masks
        alone = policy().mask_examples(rows[example:example + 1],
                                       [np.random.default_rng([9, 0, example])])
        alone = alone[0][0], alone[1][0]
        assert (alone[0] == masked[example]).all() and (alone[1] == labels[example]).all()
    assert (labels[0] != labels[1]).any()
    empty = policy().mask_examples(rows[:0], [])
    assert empty[0].shape == empty[1].shape == (0, rows.shape[1])
