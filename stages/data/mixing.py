"""A weighted mixture of datasets, one source per global batch.

Schedule: at global batch n every rank picks the source i with the largest deficit
w_i * (n + 1) - count_i (ties to the lower index), the "smooth weighted round robin".
It is a pure function of n and the weights, so ranks agree without talking, and after n
batches every count_i is within 1 of w_i * n: the proportions are exact over a long run,
not just in expectation. A whole global batch comes from one source, so batches of
different objectives (different keys) never share a tensor.

State: the number of batches drawn plus each source's own state; sources are loaders
with the same rank and world size, so a mixture resumes on another world size as its
sources do (each source's position is global: the examples its ranks have taken together).

On disk (the dataset stage's dataset.mixture): the top-level index.json lists the parts
under "mixture", each a dataset of its own in a sub-folder; `open_mixture` opens one
loader per part over the same split and mixes them by the weights recorded there.
"""

from __future__ import annotations

import json
import os

import numpy as np

from stages.data.loader import ExampleLoader
from stages.data.packed import INDEX_FILE, DamagedShardError, read_index
from storage.urls import is_url


def mixture_schedule(weights: list[float], num_batches: int, start: int = 0) -> np.ndarray:
    """Source index of global batches start .. start + num_batches - 1."""
    w = np.asarray(weights, dtype=np.float64) / sum(weights)
    counts = _counts_after(w, start)
    out = np.empty(num_batches, dtype=np.int64)
    for offset in range(num_batches):
        n = start + offset
        source = int(np.argmax(w * (n + 1) - counts))
        counts[source] += 1
        out[offset] = source
    return out


def _counts_after(w: np.ndarray, n: int) -> np.ndarray:
    """Counts after n batches, replayed (cheap: a few microseconds per batch, done once on
    resume)."""
    counts = np.zeros(len(w))
    for m in range(n):
        counts[int(np.argmax(w * (m + 1) - counts))] += 1
    return counts


class MixtureLoader:
    """Iterates forever over `loaders` (ExampleLoader or PackedSequenceLoader, each with
    its own dataset, the same rank and world size) in proportion to `weights`. Each item
    is what the chosen loader yields; `last_source` says which one."""

    def __init__(self, loaders: list, weights: list[float], names: list[str] | None = None):
        if len(loaders) != len(weights) or not loaders:
            raise ValueError(f"got {len(loaders)} loaders and {len(weights)} weights; give "
                             f"one weight per loader")
        if min(weights) <= 0:
            raise ValueError(f"weights {weights} must all be positive; drop a source instead "
                             f"of giving it weight 0")
        self.loaders = loaders
        self.names = list(names) if names is not None else [str(i) for i in range(len(loaders))]
        self.weights = [float(w) for w in weights]
        self._w = np.asarray(self.weights) / sum(self.weights)
        self.batches = 0
        self._counts = np.zeros(len(loaders))
        self.last_source = -1

    def __iter__(self):
        return self

    def __next__(self):
        source = int(np.argmax(self._w * (self.batches + 1) - self._counts))
        self._counts[source] += 1
        self.batches += 1
        self.last_source = source
        return next(self.loaders[source])

    def state_dict(self) -> dict:
        return {"batches": self.batches, "weights": self.weights, "names": self.names,
                "sources": [loader.state_dict() for loader in self.loaders]}

    def load_state_dict(self, state: dict) -> None:
        names = state.get("names", self.names)
        if (state["weights"] != self.weights or len(state["sources"]) != len(self.loaders)
                or names != self.names):
            raise ValueError(
                f"the saved mixture has sources {names} with weights {state['weights']}, this "
                f"one {self.names} with {self.weights}: resuming would change the proportions; "
                f"use the same sources and weights")
        for loader, loader_state in zip(self.loaders, state["sources"], strict=True):
            loader.load_state_dict(loader_state)
        self.batches = state["batches"]
        self._counts = _counts_after(self._w, self.batches)


def mixture_parts(index: dict) -> list[dict]:
    """The parts ({"name", "weight", "path"}) a dataset's index.json lists; [] for a
    dataset of one source."""
    return list(index.get("mixture", []))


def read_top_index(dataset_dir: str | os.PathLike) -> dict:
    """index.json of a dataset, local or at an fsspec URL (only this file is fetched: the
    parts' loaders fetch their own shards)."""
    if not is_url(dataset_dir):
        return read_index(dataset_dir)
    import fsspec

    with fsspec.open(f"{str(dataset_dir).rstrip('/')}/{INDEX_FILE}", "r", encoding="utf-8") as f:
        return json.load(f)


def part_dir(dataset_dir: str | os.PathLike, part: dict) -> str:
    return f"{str(dataset_dir).rstrip('/')}/{part['path']}"  # a string join keeps s3:// intact


def open_mixture(dataset_dir: str | os.PathLike, split: str, batch_size: int, rank: int = 0,
                 world_size: int = 1, seed: int = 0, **loader_options) -> MixtureLoader:
    """One ExampleLoader per part of the mixture dataset at `dataset_dir`, mixed by the
    weights its index.json records. `loader_options` (the caller's batch_builder among
    them) go to every ExampleLoader."""
    parts = mixture_parts(read_top_index(dataset_dir))
    if not parts:
        raise ValueError(f"{dataset_dir}/{INDEX_FILE} lists no mixture; open it with "
                         f"ExampleLoader (the dataset has one source)")
    loaders = []
    for part in parts:
        try:
            loaders.append(ExampleLoader(part_dir(dataset_dir, part), split, batch_size, rank,
                                         world_size, seed, **loader_options))
        except DamagedShardError:
            raise  # already names the file
        except ValueError as error:  # too few rows for a global batch, a missing split
            raise ValueError(f"mixture part {part['name']!r}: {error}") from error
    return MixtureLoader(loaders, [part["weight"] for part in parts], [part["name"] for part in parts])


def open_examples(dataset_dir: str | os.PathLike, split: str, batch_size: int, rank: int = 0,
                  world_size: int = 1, seed: int = 0, **loader_options) -> ExampleLoader | MixtureLoader:
    """The loader a dataset calls for: a MixtureLoader where its index.json lists a
    mixture, else one ExampleLoader."""
    if mixture_parts(read_top_index(dataset_dir)):
        return open_mixture(dataset_dir, split, batch_size, rank, world_size, seed, **loader_options)
    return ExampleLoader(dataset_dir, split, batch_size, rank, world_size, seed, **loader_options)
