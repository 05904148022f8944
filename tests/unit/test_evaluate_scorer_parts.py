"""The pieces the scorers share: lm-eval's pair encoding, rolling chunks, the shared-prefix
mask, and load_scorer (family from model_config.json, the folders it accepts, its errors)."""

from __future__ import annotations

import json

import pytest
import torch
from tokenizers import Tokenizer

from stages.evaluate.scorers import BertScorer, GPTScorer, T5Scorer, load_scorer
from stages.evaluate.scorers.encoding import encode_pairs, split_trailing_whitespace
from stages.evaluate.scorers.shared_prefix import shared_prefix_mask, shared_prefix_row
from stages.evaluate.scorers.windows import check_stride, score_chunks
from tests.support.pretrained_dirs import train_tokenizer, write_pretrained, book_paragraphs


@pytest.fixture(scope="module")
def bpe() -> Tokenizer:
    return train_tokenizer("gpt", 512, book_paragraphs(20_000))[0]


def test_trailing_whitespace_moves_to_the_continuation():
    assert split_trailing_whitespace("Q: a \n ", "b") == ("Q: a", " \n b")
    assert split_trailing_whitespace("Q: a", " b") == ("Q: a", " b")


def test_pairs_split_the_joint_tokenization_after_the_context(bpe):
    [(context, continuation)] = encode_pairs(bpe, [("The dog ", "barked")], prefix_id=0)
    assert context == bpe.encode("The dog").ids
    assert context + continuation == bpe.encode("The dog barked").ids


def test_an_empty_context_becomes_the_prefix_token_unless_the_continuation_starts_with_it(bpe):
    hello = bpe.encode("Hello").ids
    assert encode_pairs(bpe, [("", "Hello")], prefix_id=0) == [([0], hello)]
    assert encode_pairs(bpe, [("", "<|endoftext|>Hello")], prefix_id=0) == [([0], hello)]
    assert encode_pairs(bpe, [("  ", "Hello")], prefix_id=0) == [([0], bpe.encode("  Hello").ids)]
    assert encode_pairs(bpe, [("", "Hello")], prefix_id=None) == [([], hello)]


def test_score_chunks_cover_every_token_once():
    assert score_chunks(10, first=4, stride=4) == [(0, 4), (4, 8), (8, 10)]
    assert score_chunks(10, first=4, stride=2) == [(0, 4), (4, 6), (6, 8), (8, 10)]
    assert score_chunks(3, first=4, stride=4) == [(0, 3)]
    assert score_chunks(0, first=4, stride=4) == []
    assert check_stride(None, 128, "gpt") == 128
    with pytest.raises(ValueError, match="1 <= stride <= 128"):
        check_stride(0, 128, "gpt")


def test_lm_eval_disjoint_windows_are_the_stride_equal_to_context_chunks():
    import lm_eval.utils as utils
    tokens = list(range(100, 137))
    for max_length in (4, 8, 37, 40):
        theirs = [utils.make_disjoint_window(w) for w in utils.get_rolling_token_windows(
            tokens, prefix_token=0, max_seq_len=max_length, context_len=1)]
        padded = [0, *tokens]
        ours = [(padded[max(0, end - max_length):end], tokens[start:end])
                for start, end in score_chunks(len(tokens), max_length, max_length)]
        # lm-eval's model input is (context + continuation)[-(max_length + 1):][:-1]
        assert [((c + t)[-(max_length + 1):][:-1], t) for c, t in theirs] == ours


def test_shared_prefix_row_and_mask():
    row, predictors = shared_prefix_row([5, 6, 7], [[10, 11, 12], [20, 21], [30]])
    assert row.tokens == [5, 6, 7, 10, 11, 20]
    assert row.positions == [0, 1, 2, 3, 4, 3]
    assert row.segments == [0, 0, 0, 1, 1, 2]
    assert predictors == [[2, 3, 4], [2, 5], [2]]
    segments = torch.tensor([row.segments + [-1]])  # one padding position
    mask = shared_prefix_mask(segments)[0, 0].int().tolist()
    assert mask == [[1, 0, 0, 0, 0, 0, 0],
                    [1, 1, 0, 0, 0, 0, 0],
                    [1, 1, 1, 0, 0, 0, 0],
                    [1, 1, 1, 1, 0, 0, 0],
                    [1, 1, 1, 1, 1, 0, 0],
                    [1, 1, 1, 0, 0, 1, 0],  # the second branch does not see the first
                    [1, 1, 1, 0, 0, 0, 1]]  # padding (its output is never read): no padding key but itself


@pytest.mark.parametrize(("family", "architecture", "scorer_class"), [
    ("gpt", {"num_layers": 1, "hidden_size": 32, "num_heads": 2}, GPTScorer),
    ("bert", {"num_layers": 1, "hidden_size": 32, "num_heads": 2}, BertScorer),
    ("t5", {"num_layers": 1, "hidden_size": 32, "num_heads": 2, "head_size": 16, "ff_size": 64}, T5Scorer),
])
def test_load_scorer_picks_the_family_and_reads_model_or_its_parent(tmp_path, family, architecture, scorer_class):
    root = write_pretrained(tmp_path, family, architecture, vocab_size=1024, max_seq_len=None if family == "t5" else 48)
    for folder in (root / "model", root):
        scorer = load_scorer(folder, batch_size=2)
        assert isinstance(scorer, scorer_class) and scorer.family == family
        assert scorer.max_length == (512 if family == "t5" else 48)
        assert not scorer.model.training


def test_load_scorer_errors_name_the_folder_and_the_fix(tmp_path):
    root = write_pretrained(tmp_path, "gpt", {"num_layers": 1, "hidden_size": 32, "num_heads": 2}, vocab_size=512)
    with pytest.raises(ValueError, match="max_seq_len=128"):
        load_scorer(root / "model", max_length=256)
    config = json.loads((root / "model" / "model_config.json").read_text())
    (root / "model" / "model_config.json").write_text(json.dumps({**config, "vocab_size": 300}))
    with pytest.raises(ValueError, match="model.safetensors"):  # the weights no longer fit the config
        load_scorer(root / "model")
    (root / "model" / "tokenizer.json").unlink()
    with pytest.raises(FileNotFoundError, match="tokenizer.json"):
        load_scorer(root / "model")
