"""Fixtures shared by unit tests that need real ingested text."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from pipeline.context import StageContext
from stages.ingest.config import IngestConfig
from stages.ingest.run import run as run_ingest

TWO_SMALL_BOOKS = ["corpus/gutenberg/The-Dunwich-Horror.txt", "corpus/gutenberg/pg7700.txt"]


@pytest.fixture(scope="module")
def ingest_dir(data_dir, tmp_path_factory) -> Path:
    """The ingest stage's output for two small real books (2 shards), once per module."""
    output_dir = tmp_path_factory.mktemp("ingest")
    config = IngestConfig(sources=[{"path": book} for book in TWO_SMALL_BOOKS], num_shards=2)
    run_ingest(StageContext(name="ingest", config=config, output_dir=output_dir,
                            experiment=SimpleNamespace(seed=0, data_dir=str(data_dir))))
    return output_dir
