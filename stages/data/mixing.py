"""A weighted mixture of datasets, one source per global batch.

Schedule: at global batch n every rank picks the source i with the largest deficit
w_i * (n + 1) - count_i (ties to the lower index), the "smooth weighted round robin".
It is a pure function of n and the weights, so ranks agree without talking, and after n
batches every count_i is within 1 of w_i * n: the proportions are exact over a long run,
not just in expectation. A whole global batch comes from one source, so batches of
different objectives (different keys) never share a tensor.

State: the number of batches drawn plus each source's own state; sources are loaders
with the same rank and world size, so a mixture resumes on another world size as its
sources do.
"""

from __future__ import annotations

import numpy as np


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

    def __init__(self, loaders: list, weights: list[float]):
        if len(loaders) != len(weights) or not loaders:
            raise ValueError(f"got {len(loaders)} loaders and {len(weights)} weights; give "
                             f"one weight per loader")
        if min(weights) <= 0:
            raise ValueError(f"weights {weights} must all be positive; drop a source instead "
                             f"of giving it weight 0")
        self.loaders = loaders
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
        return {"batches": self.batches, "weights": self.weights,
                "sources": [loader.state_dict() for loader in self.loaders]}

    def load_state_dict(self, state: dict) -> None:
        if state["weights"] != self.weights or len(state["sources"]) != len(self.loaders):
            raise ValueError(
                f"the saved mixture has weights {state['weights']}, this one {self.weights}: "
                f"resuming would change the proportions; use the same sources and weights")
        for loader, loader_state in zip(self.loaders, state["sources"], strict=True):
            loader.load_state_dict(loader_state)
        self.batches = state["batches"]
        self._counts = _counts_after(self._w, self.batches)
