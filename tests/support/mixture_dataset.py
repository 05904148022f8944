"""A real two-source data mixture for the mixing tests: two small books ingested together
(3 shards), one shared tokenizer, and the dataset stage's dataset.mixture with one part
per book, weights 3 and 1. Built by the stages as plain functions (no Ray): about a
second."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from pipeline.context import StageContext
from stages.dataset.config import DatasetConfig
from stages.dataset.run import run as run_dataset
from stages.ingest.config import IngestConfig
from stages.ingest.run import run as run_ingest
from stages.tokenizer.config import TokenizerConfig
from stages.tokenizer.run import run as run_tokenizer

HORROR, ROMANCE = "corpus/gutenberg/The-Dunwich-Horror.txt", "corpus/gutenberg/pg7700.txt"
SEQ_LEN = 32
# The second part takes "every text file": the first match wins, so it holds ROMANCE only.
MIXTURE = [{"name": "horror", "source": HORROR, "weight": 3.0},
           {"name": "romance", "source": "corpus/**/*.txt", "weight": 1.0}]


def stage(name: str, config, output_dir: Path, inputs: dict, data_dir: str = "unused") -> StageContext:
    return StageContext(name=name, config=config, output_dir=output_dir, inputs=inputs,
                        experiment=SimpleNamespace(seed=0, data_dir=data_dir))


def build_upstream(root: Path, data_dir: Path) -> dict[str, Path]:
    inputs = {"ingest": root / "ingest", "tokenizer": root / "tokenizer"}
    run_ingest(stage("ingest", IngestConfig(sources=[{"path": HORROR}, {"path": ROMANCE}], num_shards=3),
                     inputs["ingest"], {}, str(data_dir)))
    run_tokenizer(stage("tokenizer", TokenizerConfig(vocab_size=600), inputs["tokenizer"],
                        {"ingest": inputs["ingest"]}))
    return inputs


def build_mixture(upstream: dict[str, Path], output_dir: Path, mixture=MIXTURE, **options) -> dict:
    config = DatasetConfig(seq_len=SEQ_LEN, validation_fraction=0.1, mixture=mixture, **options)
    return run_dataset(stage("dataset", config, output_dir, upstream))
