"""Causal language modelling (gpt): documents as token streams, each followed by eos,
cut into rows of seq_len (writer.py); the loader hands rows as they are, with optional
document ids (batch.py); every position predicts the next token (loss.py)."""

from __future__ import annotations

from stages.objectives.base import PretrainingObjective
from stages.objectives.clm.writer import ClmWriter


class ClmObjective(PretrainingObjective):
    name = "clm"
    model_family = "gpt"
    reads_stats = False  # no padding, no masking: nothing to count beyond the index

    def writer(self, spec, path, max_rows, rng):
        return ClmWriter(spec, path, max_rows)

    def batch_builder(self, index, seed):
        from stages.objectives.clm.batch import ClmBatch
        return ClmBatch(index)

    def loss(self, index, index_path, span_boundary=False, variant=None):
        from stages.objectives.clm.loss import CausalLM
        return CausalLM(index["seq_len"])
