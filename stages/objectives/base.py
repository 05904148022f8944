"""What every pretraining objective is: one object for the three places an objective
shows up (the dataset stage's writer, the loader's batch builder, the trainer's loss).

    objective = objective_named(config.objective)                # stages.objectives.registry
    entries = objective.index_entries(config, ids)               # dataset stage: its part of index.json
    writer = objective.writer(spec, path, max_rows, rng)         # one split of one shard
    stats = objective.split_stats(batches, seq_len, pad_id, sentinels)   # of a finished split
    build_batch = objective.batch_builder(index, seed)           # a loader's stored columns -> tensors
    loss = objective.loss(index, index_path)                     # batch -> ObjectiveOutput

The torch parts (batch builder, loss) are imported when asked for: the dataset stage and
its Ray tasks pick a writer without importing torch.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

import numpy as np

from stages.tokenizer.output import TokenIds

if TYPE_CHECKING:  # the loader imports torch
    from stages.data.loader import BatchBuilder


class ShardWriter(Protocol):
    """Examples of one split of one ingest shard, into one Arrow file."""

    @property
    def full(self) -> bool: ...

    def add(self, documents) -> int:
        """Encoded documents (a list of id lists, or a SentenceWindow for `by_sentence`
        objectives) -> examples; returns the number of tokens taken."""

    def commit(self) -> int:
        """Write the rest, close, rename; returns the number of examples."""


@dataclass(frozen=True)
class WriterSpec:
    """Everything a writer needs, picklable (it travels to Ray tasks inside a PackJob).
    entries: the objective's index.json entries (`index_entries`): the writer reads its
    settings where the loader reads them, so that both draw masks alike."""
    objective: PretrainingObjective
    seq_len: int
    dtype: str
    ids: TokenIds
    entries: dict[str, Any]


class PretrainingObjective(ABC):
    """name:          dataset.objective, and index.json's "objective"
    model_family:     the pretrain.model.family it trains
    by_sentence:      the dataset stage encodes documents sentence by sentence for it
    reads_stats:      its split statistics read the finished shards (clm's need none)"""

    name: ClassVar[str]
    model_family: ClassVar[str]
    by_sentence: ClassVar[bool] = False
    reads_stats: ClassVar[bool] = True

    def index_entries(self, config, ids: TokenIds) -> dict[str, Any]:
        """Its entries of index.json besides the ones every dataset has, from the dataset
        section `config` (stages.dataset.config.DatasetConfig): what the loader needs to
        turn stored columns into a batch, so that it never needs the tokenizer."""
        return {}

    @abstractmethod
    def writer(self, spec: WriterSpec, path: str, max_rows: int | None,
               rng: np.random.Generator) -> ShardWriter:
        """Writes `path` (at most max_rows examples; None: no limit), randomness from rng."""

    def split_stats(self, batches: Iterable[dict[str, np.ndarray]], seq_len: int,
                    pad_id: int | None, sentinels: tuple[int, ...]) -> dict[str, Any]:
        """Statistics of a finished split from its record batches (column arrays)."""
        return {"padding_fraction": 0.0}

    @abstractmethod
    def batch_builder(self, index: dict[str, Any], seed: int) -> BatchBuilder:
        """The loader's batch builder for the dataset `index`; anything random in it is a
        function of (seed, epoch, example index) only."""

    @abstractmethod
    def loss(self, index: dict[str, Any], index_path: str | Path, span_boundary: bool = False,
             variant: str | None = None):
        """The trainer's objective: (model, batch, label_smoothing) -> ObjectiveOutput.
        span_boundary: the model has SpanBERT's SBO head; variant: the model config's."""


def special_entries(ids: TokenIds) -> dict[str, Any]:
    """index.json's special token ids (mlm and span datasets)."""
    return {"cls_id": ids.cls, "sep_id": ids.sep, "mask_id": ids.mask, "special_ids": list(ids.special)}
