"""The vocabulary size asked for and the one trained: a corpus too small for the request
is warned about, both numbers are in the stage metrics, and a vocabulary above 65,535
ids (int32 dataset columns) goes through the dataset stage and the loader."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from tokenizers import Tokenizer

from pipeline.context import StageContext
from stages.data.loader import PackedSequenceLoader
from stages.dataset.config import DatasetConfig
from stages.dataset.run import run as run_dataset
from stages.tokenizer.config import TokenizerConfig
from stages.tokenizer.run import TOKENIZER_FILE, vocabulary_shortfall
from stages.tokenizer.run import run as run_tokenizer


def train(ingest_dir: Path, output_dir: Path, **options) -> dict:
    return run_tokenizer(StageContext(
        name="tokenizer", config=TokenizerConfig(**options), output_dir=output_dir,
        inputs={"ingest": ingest_dir}, experiment=SimpleNamespace(seed=0, data_dir="unused")))


def test_a_vocabulary_far_below_the_request_is_warned_about(ingest_dir, tmp_path, capsys):
    metrics = train(ingest_dir, tmp_path / "tok", vocab_size=70_000)
    assert metrics["vocab_size_requested"] == 70_000 and metrics["vocab_size"] < 20_000
    warning = capsys.readouterr().out
    assert f"[tokenizer] warning: the trained vocabulary has {metrics['vocab_size']:,} tokens" in warning
    assert "70,000 requested (tokenizer.vocab_size)" in warning
    assert "tokenizer.min_frequency = 2" in warning and "the whole corpus" in warning

    metrics = train(ingest_dir, tmp_path / "small", vocab_size=600)
    assert metrics["vocab_size"] == metrics["vocab_size_requested"] == 600
    assert "warning" not in capsys.readouterr().out


def test_a_small_sample_of_a_big_corpus_names_sample_bytes():
    metrics = {"vocab_size": 8_513, "vocab_size_requested": 70_000,
               "sample_bytes_used": 1_000_000, "corpus_bytes": 40_000_000}
    warning = vocabulary_shortfall(metrics, TokenizerConfig(vocab_size=70_000, sample_bytes=1_000_000))
    assert "1,000,000 bytes of a 40,000,000-byte corpus (tokenizer.sample_bytes 1,000,000)" in warning
    assert "raise tokenizer.sample_bytes or lower tokenizer.min_frequency" in warning
    unigram = vocabulary_shortfall(metrics, TokenizerConfig(kind="unigram", vocab_size=70_000))
    assert "min_frequency" not in unigram  # the unigram trainer has no such setting
    assert vocabulary_shortfall({**metrics, "vocab_size": 63_000}, TokenizerConfig()) is None


def test_a_vocabulary_above_uint16_builds_an_int32_dataset_that_loads(ingest_dir, tmp_path):
    train(ingest_dir, tmp_path / "tok", vocab_size=600)
    # Grow the trained tokenizer past 65,535 ids: "the" becomes one of the top ids.
    path = tmp_path / "tok" / TOKENIZER_FILE
    tokenizer = Tokenizer.from_file(str(path))
    tokenizer.add_tokens([f"unused{i}" for i in range(70_000 - tokenizer.get_vocab_size())] + ["the"])
    tokenizer.save(str(path))
    the_id = tokenizer.token_to_id("the")
    assert the_id >= 70_000 > 65_535

    metrics = run_dataset(StageContext(
        name="dataset", config=DatasetConfig(seq_len=32), output_dir=tmp_path / "dataset",
        inputs={"ingest": ingest_dir, "tokenizer": tmp_path / "tok"},
        experiment=SimpleNamespace(seed=0, data_dir="unused")))
    assert metrics["dtype"] == "int32"
    loader = PackedSequenceLoader(tmp_path / "dataset", "train", batch_size=64)
    assert int(next(loader).max()) == the_id
