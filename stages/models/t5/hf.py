"""T5 as Hugging Face's T5ForConditionalGeneration: config.json's dict and the state dict,
both ways (`convert.py`). The original Transformer (variant transformer) has no
transformers class. `stages/models/hf_export.py` writes and reads the folders.
"""

from __future__ import annotations

from typing import Any

import torch

from stages.models.t5.convert import hf_t5_config, hf_t5_to_t5, t5_config_from_hf, t5_to_hf_t5
from stages.models.t5.model import T5

HfModel = tuple[dict[str, Any], dict[str, torch.Tensor], list[str]]  # config, state, names HF ties


def t5_to_hf(model: T5) -> HfModel:
    """(config.json dict, HF state dict, names HF ties to another tensor)."""
    config = {"model_type": "t5", "architectures": ["T5ForConditionalGeneration"], **hf_t5_config(model.config)}
    tied = ["encoder.embed_tokens.weight", "decoder.embed_tokens.weight"]
    if model.config.tie_word_embeddings:
        tied.append("lm_head.weight")
    return config, t5_to_hf_t5(model.state_dict(), model.config), tied


def t5_from_hf(hf_config: dict[str, Any], state: dict[str, torch.Tensor],
               source: str) -> tuple[T5, dict[str, torch.Tensor]]:
    config = t5_config_from_hf(hf_config)
    return T5(config), hf_t5_to_t5(state, config)
