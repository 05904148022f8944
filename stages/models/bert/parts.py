"""The parts a BERT-family variant puts around the one post-LN encoder (`model.py`),
chosen once by `Bert.__init__` from `PARTS[config.variant]`: the encoder reads no variant.

    bert     no embedding projection (E == C), a tanh pooler over [CLS]
    albert   always a projection E -> C (ALBERT's embedding_hidden_mapping_in), a pooler
    electra  a projection only when E != C (Hugging Face's embeddings_project), no pooler

A new variant is a new row here (and its config rules), not a branch in the encoder.
Each builder takes the model's BertConfig and returns a module, or None for no such part.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch.nn as nn


@dataclass(frozen=True)
class EncoderParts:
    embedding_projection: Callable[..., nn.Module | None]  # config -> E -> C projection, or None
    pooler: Callable[..., nn.Module | None]  # config -> the [CLS] pooler's dense layer, or None


def projection(config) -> nn.Module:
    return nn.Linear(config.embedding_size, config.hidden_size)


def projection_if_widths_differ(config) -> nn.Module | None:
    return projection(config) if config.embedding_size != config.hidden_size else None


def pooler(config) -> nn.Module:
    return nn.Linear(config.hidden_size, config.hidden_size)


def no_part(config) -> None:
    return None


PARTS = {
    # BERT's embeddings are C wide (the config refuses another embedding_size)
    "bert": EncoderParts(embedding_projection=projection_if_widths_differ, pooler=pooler),
    "albert": EncoderParts(embedding_projection=projection, pooler=pooler),
    # ELECTRA's discriminator has no pooler (Hugging Face's ElectraModel neither)
    "electra": EncoderParts(embedding_projection=projection_if_widths_differ, pooler=no_part),
}
