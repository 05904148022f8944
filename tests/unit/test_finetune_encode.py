"""Tokenizing task examples: fixed length, attention masks, an end token, pairs."""

from __future__ import annotations

import numpy as np
import pytest
from tokenizers import Tokenizer

from stages.finetune.encode import END_OF_TEXT, PAD, encode_texts, load_task_tokenizer
from stages.finetune.glue.reader import read_split
from stages.finetune.tasks import get_task
from stages.tokenizer.config import TokenizerConfig
from stages.tokenizer.recipes import build_recipe, build_tokenizer

SEQ_LEN = 32


@pytest.fixture(scope="module")
def sst2_dev(data_dir):
    return read_split(get_task("sst2"), data_dir, "dev")


@pytest.fixture(scope="module")
def tokenizer_path(tmp_path_factory, sst2_dev):
    """The pipeline's own byte-level BPE recipe, trained on 300 SST-2 sentences."""
    recipe = build_recipe(TokenizerConfig(vocab_size=600, min_frequency=1))
    tokenizer = build_tokenizer(recipe)
    tokenizer.train_from_iterator([t[0] for t in sst2_dev.texts[:300]], trainer=recipe.trainer)
    path = tmp_path_factory.mktemp("tokenizer") / "tokenizer.json"
    tokenizer.save(str(path))
    return path


def test_single_sentences_become_fixed_length_rows_with_masks(tokenizer_path, sst2_dev):
    tokenizer = load_task_tokenizer(tokenizer_path, SEQ_LEN)
    eos, pad = tokenizer.token_to_id(END_OF_TEXT), tokenizer.token_to_id(PAD)
    encoded = encode_texts(tokenizer, sst2_dev.texts[:100], sst2_dev.labels[:100])
    assert encoded.input_ids.shape == encoded.attention_mask.shape == (100, SEQ_LEN)
    assert encoded.input_ids.dtype == np.int32 and encoded.attention_mask.dtype == np.int8
    assert encoded.labels.tolist() == sst2_dev.labels[:100].tolist()
    lengths = encoded.attention_mask.sum(axis=1)
    assert lengths.min() >= 2 and lengths.max() == SEQ_LEN  # some rows were truncated
    for ids, mask, length in zip(encoded.input_ids, encoded.attention_mask, lengths):
        assert mask.tolist() == [1] * length + [0] * (SEQ_LEN - length)  # right padding
        assert ids[length - 1] == eos  # the last real token, even after truncation
        assert (ids[length:] == pad).all()


def test_encoding_reproduces_the_sentence(tokenizer_path):
    tokenizer = load_task_tokenizer(tokenizer_path, SEQ_LEN)
    encoded = encode_texts(tokenizer, [("a gorgeous , witty film",)], None)
    length = encoded.attention_mask[0].sum()
    assert tokenizer.decode(encoded.input_ids[0, :length - 1].tolist()) == "a gorgeous , witty film"
    assert encoded.labels is None


def test_pairs_are_joined_by_end_tokens(tokenizer_path):
    tokenizer = load_task_tokenizer(tokenizer_path, SEQ_LEN)
    eos = tokenizer.token_to_id(END_OF_TEXT)
    encoded = encode_texts(tokenizer, [("the film", "a movie")], None)
    real = encoded.input_ids[0, : encoded.attention_mask[0].sum()].tolist()
    assert real.count(eos) == 2 and real[-1] == eos
    first_end = real.index(eos)
    assert tokenizer.decode(real[:first_end]) == "the film"
    assert tokenizer.decode(real[first_end + 1:-1]) == "a movie"


def test_tokenizer_without_pad_token_is_explained(tmp_path):
    from tokenizers import models

    path = tmp_path / "tokenizer.json"
    Tokenizer(models.BPE()).save(str(path))
    with pytest.raises(ValueError, match=r"tokenizer.json: tokenizer has no special token\(s\) .*<\|pad\|>"):
        load_task_tokenizer(path, SEQ_LEN)
