"""One split of a task, held as columns (67k SST-2 rows as lists, not 67k objects)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class TaskExamples:
    """texts:   one tuple per example: (sentence,) or (sentence1, sentence2)
    labels:     class ids (int64) or regression targets (float32); None for the test split
    ids:        what identifies a row in outputs: the file's index column where it has one,
                else the row's position in the file (0-based, header not counted)
    """

    texts: list[tuple[str, ...]]
    labels: np.ndarray | None
    ids: list[str]

    def __len__(self) -> int:
        return len(self.texts)

    def subset(self, positions: np.ndarray) -> "TaskExamples":
        positions = np.asarray(positions)
        return TaskExamples(
            texts=[self.texts[i] for i in positions],
            labels=None if self.labels is None else self.labels[positions],
            ids=[self.ids[i] for i in positions],
        )

    def sample(self, max_examples: int | None, seed: int) -> "TaskExamples":
        """A seeded random subset of at most `max_examples` rows, kept in file order
        (the trainer shuffles per epoch; file order keeps the subset easy to inspect)."""
        if max_examples is None or max_examples >= len(self):
            return self
        rng = np.random.default_rng(seed)
        return self.subset(np.sort(rng.choice(len(self), size=max_examples, replace=False)))
