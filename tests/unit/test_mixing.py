"""MixtureLoader: exact proportions, determinism, resume."""

from __future__ import annotations

import numpy as np
import pytest

from stages.data.mixing import MixtureLoader, mixture_schedule


class CountingLoader:
    """Yields (name, i) forever; its state is i."""

    def __init__(self, name: str):
        self.name, self.i = name, 0

    def __next__(self):
        self.i += 1
        return self.name, self.i - 1

    def state_dict(self):
        return {"i": self.i}

    def load_state_dict(self, state):
        self.i = state["i"]


def test_proportions_are_exact_at_every_point_of_a_long_run():
    weights = [0.5, 0.3, 0.2]
    schedule = mixture_schedule(weights, 10_000)
    counts = np.zeros(3)
    for n, source in enumerate(schedule, start=1):
        counts[source] += 1
        assert np.all(np.abs(counts - np.array(weights) * n) < 1.0 + 1e-9)
    assert counts.tolist() == [5000, 3000, 2000]
    assert (mixture_schedule(weights, 10_000) == schedule).all()  # deterministic
    assert (mixture_schedule(weights, 100, start=500) == schedule[500:600]).all()


def test_resume_continues_the_same_sequence():
    def mixture():
        return MixtureLoader([CountingLoader("a"), CountingLoader("b")], [3, 1])

    reference = [next(m) for m in [mixture()] for _ in range(400)]
    first = mixture()
    seen = [next(first) for _ in range(137)]
    resumed = mixture()
    resumed.load_state_dict(first.state_dict())
    seen += [next(resumed) for _ in range(400 - 137)]
    assert seen == reference
    assert sum(name == "a" for name, _ in reference) == 300
    with pytest.raises(ValueError, match="same sources and weights"):
        MixtureLoader([CountingLoader("a"), CountingLoader("b")], [1, 1]).load_state_dict(
            first.state_dict())
