"""The tokenizer stage as a plain function call, trained on two real (small) books."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from pydantic import ValidationError
from tokenizers import Tokenizer, pre_tokenizers

from pipeline.context import StageContext
from stages.tokenizer.config import TokenizerConfig
from stages.tokenizer.recipes import build_recipe, build_tokenizer
from stages.tokenizer.run import run as run_tokenizer
from tests.support.pinned import import_pinned


def train(ingest_dir: Path, output_dir: Path, seed: int = 0, **options) -> dict:
    config = TokenizerConfig(**{"vocab_size": 600, **options})
    return run_tokenizer(StageContext(
        name="tokenizer", config=config, output_dir=output_dir, inputs={"ingest": ingest_dir},
        experiment=SimpleNamespace(seed=seed, data_dir="unused")))


@pytest.fixture(scope="module")
def trained(ingest_dir, tmp_path_factory) -> tuple[Path, dict]:
    output_dir = tmp_path_factory.mktemp("tokenizer")
    return output_dir, train(ingest_dir, output_dir)


def test_bpe_round_trips_text_and_end_of_text_is_one_token(trained):
    output_dir, metrics = trained
    tokenizer = Tokenizer.from_file(str(output_dir / "tokenizer.json"))
    assert tokenizer.get_vocab_size() == metrics["vocab_size"] == 600
    text = "Wilbur Whateley — “café naïve” 東京 \t tabs\nnew line 🙂"
    assert tokenizer.decode(tokenizer.encode(text).ids) == text  # byte-level: nothing lost
    assert tokenizer.encode("<|endoftext|>").ids == [0]
    text = "end.<|endoftext|>Next"
    ids = tokenizer.encode(text).ids
    assert ids.count(0) == 1 and tokenizer.decode(ids, skip_special_tokens=False) == text
    assert tokenizer.token_to_id("<|pad|>") == 1


def test_metrics_and_special_tokens_map(trained):
    output_dir, metrics = trained
    assert 1.0 < metrics["fertility"] < 3.0 and metrics["fertility_sample"] == "heldout"
    assert 200_000 < metrics["sample_bytes_used"] <= TokenizerConfig().sample_bytes
    special = json.loads((output_dir / "special_tokens_map.json").read_text())
    assert special["eos_token"] == "<|endoftext|>" and special["pad_token"] == "<|pad|>"


def test_training_is_deterministic_and_bounded_by_sample_bytes(ingest_dir, trained, tmp_path):
    output_dir, metrics = trained
    again = train(ingest_dir, tmp_path / "again")
    trained_json = (output_dir / "tokenizer.json").read_bytes()
    assert (tmp_path / "again/tokenizer.json").read_bytes() == trained_json
    assert again["sample_bytes_used"] == metrics["sample_bytes_used"]

    small = train(ingest_dir, tmp_path / "small", sample_bytes=20_000)
    assert 10_000 < small["sample_bytes_used"] <= 20_000
    other_seed = train(ingest_dir, tmp_path / "seed1", seed=1, sample_bytes=20_000)
    assert other_seed["sample_bytes_used"] != small["sample_bytes_used"]  # another sample


def test_a_document_budget_also_bounds_the_sample(ingest_dir, trained, tmp_path):
    _, metrics = trained
    few = train(ingest_dir, tmp_path / "few", sample_documents=60)
    assert 30 < few["sample_documents_used"] <= 60
    assert few["sample_bytes_used"] < metrics["sample_bytes_used"] / 5
    # The byte budget still applies when it is reached first.
    both = train(ingest_dir, tmp_path / "both", sample_documents=10_000, sample_bytes=20_000)
    assert both["sample_bytes_used"] <= 20_000 and both["sample_documents_used"] < 10_000


def test_recipe_fills_every_slot():
    tokenizer = build_tokenizer(build_recipe(TokenizerConfig()))
    assert isinstance(tokenizer.pre_tokenizer, pre_tokenizers.ByteLevel)
    assert tokenizer.decoder is not None and tokenizer.post_processor is not None


def test_config_rejects_bad_values():
    with pytest.raises(ValidationError):
        TokenizerConfig(vocab_size=100)
    with pytest.raises(ValidationError):
        TokenizerConfig(kind="sentencepiece")


def test_transformers_loads_the_output_directory(trained):
    transformers = import_pinned("transformers")
    output_dir, _ = trained
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(output_dir))
    assert (tokenizer.eos_token_id, tokenizer.pad_token_id) == (0, 1)
    text = "Dunwich<|endoftext|>"
    assert tokenizer.decode(tokenizer(text)["input_ids"]) == text
