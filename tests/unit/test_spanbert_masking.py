"""SpanBERT masking (mask_unit: span): its statistics on a real book, and the config.

The statistics run on Pride and Prejudice (Gutenberg 1342, ~120k words) tokenized by a
WordPiece trained here, in rows of 512 tokens as SpanBERT's: about 370 rows and 6,000
spans. Tolerances are four standard errors of that sample (computed in the test), so a
correct sampler fails with a fixed seed only by a 1-in-10,000 accident, while the usual
mistakes (clipping the geometric at 10 instead of truncating it: mean 4.46; 80/10/10 per
token; spans across words) are many standard errors away.
"""

from __future__ import annotations

import json
import re
from types import SimpleNamespace

import numpy as np
import pyarrow as pa
import pyarrow.ipc  # noqa: F401  (pa.ipc)
import pyarrow.parquet as pq
import pytest
from pydantic import ValidationError
from scipy import stats
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers

from pipeline.context import StageContext
from stages.data.masking import IGNORE_INDEX
from stages.dataset.config import DatasetConfig, MlmConfig
from stages.dataset.run import run as run_dataset
from stages.data.span_masking import SpanMaskingPolicy, span_length_probabilities
from tests.conftest import DATA_DIR

BOOK = DATA_DIR / "corpus" / "gutenberg" / "1342-0.txt"
SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
PAD, CLS, SEP, MASK = 0, 2, 3, 4
SEQ_LEN = 512


def book_paragraphs() -> list[str]:
    if not BOOK.is_file():
        pytest.fail(f"{BOOK} missing: set DATA_DIR to the shared data folder")
    text = BOOK.read_text(encoding="utf-8")
    text = text[text.index("Chapter I.]"):]  # after the front matter and illustrations list
    paragraphs = [" ".join(p.split()) for p in re.split(r"\n\s*\n", text)]
    return [p for p in paragraphs if len(p.split()) >= 5 and "Illustration" not in p]


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    # a small vocabulary, so that many words are several pieces (spans must keep them whole)
    tokenizer.train_from_iterator(book_paragraphs(), trainer=trainers.WordPieceTrainer(
        vocab_size=1500, special_tokens=SPECIAL))
    return tokenizer


@pytest.fixture(scope="module")
def rows(tokenizer) -> np.ndarray:
    """[CLS] A [SEP] B [SEP] rows of SEQ_LEN tokens cut from the book's token stream."""
    stream = np.concatenate([encoding.ids for encoding in tokenizer.encode_batch(
        book_paragraphs(), add_special_tokens=False)]).astype(np.int64)
    half = (SEQ_LEN - 3) // 2
    per_row = 2 * half
    num_rows = len(stream) // per_row
    body = stream[:num_rows * per_row].reshape(num_rows, 2, half)
    out = np.full((num_rows, SEQ_LEN), PAD, dtype=np.int64)
    out[:, 0] = CLS
    out[:, 1:half + 1] = body[:, 0]
    out[:, half + 1] = SEP
    out[:, half + 2:2 * half + 2] = body[:, 1]
    out[:, 2 * half + 2] = SEP
    return out


def policy_for(tokenizer: Tokenizer) -> SpanMaskingPolicy:
    vocab = tokenizer.get_vocab()
    word_start = np.ones(len(vocab), dtype=bool)
    for token, token_id in vocab.items():
        word_start[token_id] = not token.startswith("##")
    return SpanMaskingPolicy(mask_id=MASK, special_ids=np.arange(len(SPECIAL)),
                             vocab_size=len(vocab), word_start=word_start)


@pytest.fixture(scope="module")
def masked(tokenizer, rows):
    policy = policy_for(tokenizer)
    masked_ids, labels, spans = policy.mask_rows_with_spans(
        rows, [np.random.default_rng([11, row]) for row in range(len(rows))])
    return policy, masked_ids, labels, spans


def test_span_lengths_follow_the_truncated_geometric(masked):
    _, _, _, spans = masked
    drawn = np.array([span.drawn_words for row in spans for span in row])
    probabilities = span_length_probabilities(0.2, 10)
    lengths = np.arange(1, 11)
    mean = probabilities @ lengths
    std = np.sqrt(probabilities @ (lengths - mean) ** 2)
    assert abs(mean - 3.797) < 1e-3  # SpanBERT's "mean 3.8"
    assert len(drawn) > 3000
    # Pooled over rows, each length's count is unbiased (Wald's identity: stopping at the
    # budget does not depend on the next draw), so the histogram is the distribution's.
    tolerance = 4 * std / np.sqrt(len(drawn))
    assert abs(drawn.mean() - mean) < tolerance, (drawn.mean(), mean, tolerance)
    observed = np.bincount(drawn, minlength=11)[1:]
    _, p_value = stats.chisquare(observed, probabilities * len(drawn))
    assert p_value > 1e-4, (observed, p_value)
    # What the model sees: only an example's last span can be cut by the budget.
    taken = np.array([span.num_words for row in spans for span in row])
    assert (taken <= drawn).all()
    for row in spans:
        assert all(span.num_words == span.drawn_words for span in row[:-1])
    assert 3.3 < taken.mean() <= drawn.mean()


def test_fifteen_percent_of_the_tokens_are_masked_in_whole_words(masked, rows, tokenizer):
    _, masked_ids, labels, spans = masked
    continuation = np.zeros(tokenizer.get_vocab_size(), dtype=bool)
    for token, token_id in tokenizer.get_vocab().items():
        continuation[token_id] = token.startswith("##")
    maskable = rows > MASK
    chosen = labels != IGNORE_INDEX
    for row in range(len(rows)):
        budget = max(1, round(0.15 * maskable[row].sum()))
        # at least the budget, over it by less than the last word's pieces
        assert budget <= chosen[row].sum() < budget + 10
        covered = np.zeros(SEQ_LEN, dtype=bool)
        for span in spans[row]:
            assert not covered[span.start:span.stop].any()  # disjoint
            covered[span.start:span.stop] = True
            assert maskable[row, span.start:span.stop].all()  # inside one segment
            # never splits a word: no continuation piece right after its end, and its
            # first piece begins a word (or follows [CLS]/[SEP], where a row was cut)
            assert not (span.stop < SEQ_LEN and continuation[rows[row, span.stop]])
            assert (not continuation[rows[row, span.start]]
                    or not maskable[row, span.start - 1])
        assert (covered == chosen[row]).all()
        assert (labels[row][chosen[row]] == rows[row][chosen[row]]).all()
    share = chosen.sum() / maskable.sum()
    assert 0.15 <= share < 0.155, share


def test_mask_random_keep_is_decided_per_span(masked, rows):
    policy, masked_ids, _, spans = masked
    actions = []
    for row, row_spans in enumerate(spans):
        for span in row_spans:
            piece = masked_ids[row, span.start:span.stop]
            original = rows[row, span.start:span.stop]
            if span.action == "mask":
                assert (piece == MASK).all()
            elif span.action == "keep":
                assert (piece == original).all()
            else:
                assert (piece > MASK).all()  # random ordinary tokens, never [MASK]
            actions.append(span.action)
    num_spans = len(actions)
    for action, share in (("mask", 0.8), ("random", 0.1), ("keep", 0.1)):
        tolerance = 4 * np.sqrt(share * (1 - share) / num_spans)
        assert abs(actions.count(action) / num_spans - share) < tolerance, action
    # per span, not per token: a span is never partly [MASK]
    for row, row_spans in enumerate(spans):
        for span in row_spans:
            is_mask = masked_ids[row, span.start:span.stop] == MASK
            assert is_mask.all() or not is_mask.any()
    untouched = np.ones_like(rows, dtype=bool)
    for row, row_spans in enumerate(spans):
        for span in row_spans:
            untouched[row, span.start:span.stop] = False
    assert (masked_ids[untouched] == rows[untouched]).all()


def test_mask_rows_is_reproducible_and_per_row_generators_are_independent(masked, rows):
    policy = masked[0]
    first = policy.mask_rows(rows[:8], np.random.default_rng(5))
    again = policy.mask_rows(rows[:8], np.random.default_rng(5))
    assert all((a == b).all() for a, b in zip(first, again, strict=True))
    alone = policy.mask_examples(rows[3:4], [np.random.default_rng([1, 3])])
    batched = policy.mask_examples(rows[:8], [np.random.default_rng([1, r]) for r in range(8)])
    assert (alone[0][0] == batched[0][3]).all() and (alone[1][0] == batched[1][3]).all()


def test_config_names_the_key_of_a_bad_combination():
    assert MlmConfig(mask_unit="span").masking == "dynamic"  # the loader draws span masks too
    with pytest.raises(ValidationError, match="remove whole_word_masking"):
        MlmConfig(mask_unit="span", masking="static", whole_word_masking=True)
    with pytest.raises(ValidationError, match="max_span_words only applies to mask_unit: span"):
        MlmConfig(max_span_words=5)
    with pytest.raises(ValidationError, match="span_geometric_p"):
        MlmConfig(mask_unit="span", masking="static", span_geometric_p=0)


def test_token_and_whole_word_masking_dump_as_before_mask_unit_existed():
    # the dump is the fingerprint's input and the loader's index
    assert "mask_unit" not in MlmConfig().model_dump()
    assert MlmConfig(mask_unit="whole_word").model_dump() == \
        MlmConfig(whole_word_masking=True).model_dump()
    assert MlmConfig(mask_unit="whole_word").unit == "whole_word"
    span = MlmConfig(mask_unit="span", masking="static", max_span_words=8).model_dump()
    assert (span["mask_unit"], span["max_span_words"], span["span_geometric_p"]) == \
        ("span", 8, 0.2)
    assert MlmConfig(**span) == MlmConfig(mask_unit="span", masking="static",
                                          max_span_words=8)


def test_dataset_stage_stores_span_masks(tmp_path, tokenizer):
    ingest = tmp_path / "ingest"
    (ingest / "documents").mkdir(parents=True)
    paragraphs = book_paragraphs()[:600]
    documents = [{"id": f"d{i}", "text": " ".join(paragraphs[i:i + 6])}
                 for i in range(0, len(paragraphs), 6)]
    pq.write_table(pa.Table.from_pylist(documents), ingest / "documents" / "part-00000.parquet")
    tokenizer_dir = tmp_path / "tokenizer"
    tokenizer_dir.mkdir()
    tokenizer.save(str(tokenizer_dir / "tokenizer.json"))
    (tokenizer_dir / "special_tokens_map.json").write_text(json.dumps(
        {"pad_token": "[PAD]", "unk_token": "[UNK]", "cls_token": "[CLS]",
         "sep_token": "[SEP]", "mask_token": "[MASK]"}))
    config = DatasetConfig(objective="mlm", seq_len=128, validation_fraction=0.1,
                           mlm={"mask_unit": "span", "masking": "static"})
    output = tmp_path / "dataset"
    run_dataset(StageContext(name="dataset", config=config, output_dir=output,
                             inputs={"ingest": ingest, "tokenizer": tokenizer_dir},
                             experiment=SimpleNamespace(seed=0, data_dir="unused")))
    index = json.loads((output / "index.json").read_text())
    assert index["mlm"]["mask_unit"] == "span" and index["mlm"]["continuation_ids"]
    table = pa.concat_tables(pa.ipc.open_file(pa.memory_map(str(output / shard["path"]))
                                              ).read_all()
                             for shard in index["splits"]["train"]["shards"])
    input_ids = np.array(table.column("input_ids").to_pylist())
    labels = np.array(table.column("labels").to_pylist())
    chosen = labels != PAD
    maskable = np.arange(128)[None, :] < np.array(table.column("num_tokens").to_pylist())[:, None]
    maskable &= ~np.isin(np.where(chosen, labels, input_ids), [CLS, SEP])
    assert 0.14 < chosen.sum() / maskable.sum() < 0.17
    # spans: far fewer runs of chosen positions than chosen positions
    run_starts = chosen & ~np.pad(chosen, ((0, 0), (1, 0)))[:, :-1]
    assert chosen.sum() / run_starts.sum() > 3.0
