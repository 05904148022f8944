"""open_mixture on a real two-part dataset built by the dataset stage: every global batch
comes from one source on every rank, in the weights' proportions, and a saved position
resumes exactly, also on another world size."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from stages.data.mixing import MixtureLoader, open_examples, open_mixture
from stages.objectives.registry import build_batch_builder
from tests.support.mixture_dataset import MIXTURE, build_mixture, build_upstream

WEIGHTS = np.array([p["weight"] for p in MIXTURE]) / sum(p["weight"] for p in MIXTURE)


@pytest.fixture(scope="module")
def dataset_dir(data_dir, tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("mixture-loader")
    build_mixture(build_upstream(root, data_dir), root / "dataset")
    return root / "dataset"


def ranks(dataset_dir: Path, world_size: int, batch_size: int) -> list[MixtureLoader]:
    return [open_mixture(dataset_dir, "train", batch_size, rank, world_size, seed=7, batch_builder=build_batch_builder)
            for rank in range(world_size)]


def global_batch(loaders: list[MixtureLoader]) -> tuple[int, torch.Tensor]:
    """The source and the rows of one global batch (the ranks' batches in rank order)."""
    rows = [next(loader)["input_ids"] for loader in loaders]
    sources = {loader.last_source for loader in loaders}
    assert len(sources) == 1, "every rank must draw the same source"
    return sources.pop(), torch.cat(rows)


def part_rows(dataset_dir: Path, name: str) -> set[bytes]:
    loader = open_mixture(dataset_dir, "train", 1, batch_builder=build_batch_builder)
    part = loader.loaders[loader.names.index(name)]
    return {part._gather(np.array([i]))["input_ids"].tobytes() for i in range(part.num_rows)}


def test_global_batches_follow_the_weights_and_come_from_their_source(dataset_dir):
    loaders = ranks(dataset_dir, world_size=2, batch_size=2)
    assert isinstance(open_examples(dataset_dir, "train", 2, batch_builder=build_batch_builder), MixtureLoader)
    rows_of = {name: part_rows(dataset_dir, name) for name in loaders[0].names}
    counts = np.zeros(2)
    # 600 global batches of 4 rows: horror's ~1500 train rows run out after ~375 of its
    # 450 batches, so its loader also crosses into a second epoch.
    for n in range(1, 601):
        source, rows = global_batch(loaders)
        counts[source] += 1
        assert np.all(np.abs(counts - WEIGHTS * n) <= 1), f"after {n} batches: {counts}"
        name = loaders[0].names[source]
        assert all(row.numpy().astype(np.uint16).tobytes() in rows_of[name] for row in rows)
    assert counts.tolist() == [450, 150]
    assert loaders[0].loaders[0].epoch == 1


def test_resume_is_exact_from_a_saved_state_and_on_another_world_size(dataset_dir):
    reference = ranks(dataset_dir, world_size=2, batch_size=2)
    for _ in range(37):
        global_batch(reference)
    states = [json.loads(json.dumps(loader.state_dict())) for loader in reference]  # as a checkpoint holds it
    assert states[0] == states[1], "the position is global: one state serves every rank"
    expected = [global_batch(reference) for _ in range(60)]

    same = ranks(dataset_dir, world_size=2, batch_size=2)
    fewer = ranks(dataset_dir, world_size=1, batch_size=4)  # the same global batch on one rank
    for loaders in (same, fewer):
        for loader in loaders:
            loader.load_state_dict(states[0])
        for source, rows in expected:
            got_source, got_rows = global_batch(loaders)
            assert got_source == source and torch.equal(got_rows, rows)

    other_weights = MixtureLoader(same[0].loaders, [1.0, 1.0], same[0].names)
    with pytest.raises(ValueError, match="same sources and weights"):
        other_weights.load_state_dict(states[0])
