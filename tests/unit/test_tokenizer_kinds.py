"""WordPiece (BERT) and Unigram (T5) recipes: trained by the stage on two real books, then
loaded by `tokenizers` and `transformers` with their special tokens and templates."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from tokenizers import Tokenizer

from pipeline.context import StageContext
from stages.tokenizer.config import TokenizerConfig
from stages.tokenizer.run import run as run_tokenizer
from tests.support.pinned import import_pinned


def train(ingest_dir: Path, output_dir: Path, **options) -> dict:
    config = TokenizerConfig(**{"vocab_size": 800, "sample_bytes": 300_000, **options})
    return run_tokenizer(StageContext(
        name="tokenizer", config=config, output_dir=output_dir, inputs={"ingest": ingest_dir},
        experiment=SimpleNamespace(seed=0, data_dir="unused")))


@pytest.fixture(scope="module")
def wordpiece(ingest_dir, tmp_path_factory) -> tuple[Path, dict]:
    output_dir = tmp_path_factory.mktemp("wordpiece")
    return output_dir, train(ingest_dir, output_dir, kind="wordpiece")


@pytest.fixture(scope="module")
def unigram(ingest_dir, tmp_path_factory) -> tuple[Path, dict]:
    output_dir = tmp_path_factory.mktemp("unigram")
    return output_dir, train(ingest_dir, output_dir, kind="unigram")


def test_wordpiece_is_bert_style(wordpiece):
    output_dir, metrics = wordpiece
    tokenizer = Tokenizer.from_file(str(output_dir / "tokenizer.json"))
    assert [tokenizer.token_to_id(t) for t in ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")] == [
        0, 1, 2, 3, 4]
    assert tokenizer.get_vocab_size() == metrics["vocab_size"] <= 800
    pair = tokenizer.encode("The Whateley FARMHOUSE.", "Café!")
    assert pair.tokens[0] == "[CLS]" and pair.tokens.count("[SEP]") == 2
    assert tokenizer.decode(pair.ids) == "the whateley farmhouse. cafe!"  # lower-cased, no accents
    first_sep = pair.tokens.index("[SEP]")
    assert pair.type_ids == [0] * (first_sep + 1) + [1] * (len(pair.ids) - first_sep - 1)
    assert any(t.startswith("##") for t in tokenizer.encode("farmhouses unwholesomely").tokens)
    assert tokenizer.decode(tokenizer.encode("the old farmhouse").ids) == "the old farmhouse"
    assert 1.0 < metrics["fertility"] < 3.0 and 0 <= metrics["unknown_rate"] < 0.01
    assert metrics["kind"] == "wordpiece" and metrics["train_seconds"] > 0


def test_wordpiece_cased_keeps_case_and_accents(ingest_dir, tmp_path):
    train(ingest_dir, tmp_path, kind="wordpiece", lowercase=False, sample_bytes=50_000)
    tokenizer = Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    assert tokenizer.normalizer.normalize_str("Café") == "Café"


def test_wordpiece_loads_in_transformers(wordpiece):
    transformers = import_pinned("transformers")
    output_dir, _ = wordpiece
    for tokenizer in (transformers.AutoTokenizer.from_pretrained(str(output_dir)),
                      transformers.PreTrainedTokenizerFast(
                          tokenizer_file=str(output_dir / "tokenizer.json"),
                          **json.loads((output_dir / "special_tokens_map.json").read_text()))):
        assert (tokenizer.pad_token_id, tokenizer.unk_token_id, tokenizer.cls_token_id,
                tokenizer.sep_token_id, tokenizer.mask_token_id) == (0, 1, 2, 3, 4)
        encoded = tokenizer("the old house", "a farm", return_token_type_ids=True)
        assert encoded["input_ids"][0] == 2 and encoded["input_ids"][-1] == 3
        assert encoded["token_type_ids"][-1] == 1 and encoded["token_type_ids"][0] == 0
        assert tokenizer.decode(encoded["input_ids"], skip_special_tokens=True) == (
            "the old house a farm")


def test_unigram_is_t5_style(unigram):
    output_dir, metrics = unigram
    tokenizer = Tokenizer.from_file(str(output_dir / "tokenizer.json"))
    size = tokenizer.get_vocab_size()
    assert size == metrics["vocab_size"] == 800
    assert [tokenizer.token_to_id(t) for t in ("<pad>", "</s>", "<unk>")] == [0, 1, 2]
    assert tokenizer.token_to_id("<extra_id_0>") == size - 1
    assert tokenizer.token_to_id("<extra_id_99>") == size - 100
    encoding = tokenizer.encode("The old farmhouse <extra_id_0> stood.")
    assert encoding.tokens[-1] == "</s>" and encoding.tokens[0].startswith("▁")
    assert "<extra_id_0>" in encoding.tokens
    text = "The old farmhouse stood."
    assert tokenizer.decode(tokenizer.encode(text).ids) == text
    assert 1.0 < metrics["fertility"] < 3.0 and 0 <= metrics["unknown_rate"] < 0.01


def test_unigram_loads_in_transformers(unigram):
    transformers = import_pinned("transformers")
    output_dir, _ = unigram
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(output_dir))
    assert (tokenizer.pad_token_id, tokenizer.eos_token_id, tokenizer.unk_token_id) == (0, 1, 2)
    assert tokenizer.convert_tokens_to_ids("<extra_id_0>") == len(tokenizer) - 1
    ids = tokenizer("The old farmhouse")["input_ids"]
    assert ids[-1] == 1 and tokenizer.decode(ids, skip_special_tokens=True) == "The old farmhouse"


def test_training_unigram_is_deterministic(ingest_dir, unigram, tmp_path):
    # Not WordPiece: its trainer breaks merge ties in hash-map order upstream
    # (huggingface/tokenizers#1794); at this vocabulary (800) 12 trainings gave 5
    # different files. See stages/tokenizer/recipes.py canonical_wordpiece.
    output_dir, _ = unigram
    train(ingest_dir, tmp_path / "unigram", kind="unigram")
    assert (tmp_path / "unigram" / "tokenizer.json").read_bytes() == (
        output_dir / "tokenizer.json").read_bytes()
