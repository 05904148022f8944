"""The model folder a training run starts from, as the driver resolved it: one frozen record
that travels pickled to the Ray workers.

    source = resolve_init_source(...)     # pretrain.init_from (stages/pretrain/init_from.py)
    source = resolve_model_source(...)    # finetune's backbone (stages/finetune/model_source.py)
    source.family, source.weights_file, source.tokenizer, ...

Both kinds of folder are described the same way: "pretrained" is the pretrain stage's
model/ (or one of its snapshots: model_config.json + model.safetensors + tokenizer.json),
"hf" a Hugging Face folder (config.json + weights). Only pretrain.init_from parses the
folder's config into `architecture` (the workers build the model from it); fine-tuning
loads the folder whole. Imports no torch: the drivers build it before Ray starts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, kw_only=True)
class ModelSource:
    format: str  # "pretrained" (this pipeline's model folder) or "hf" (a Hugging Face folder)
    path: str  # the folder, absolute
    family: str  # gpt | bert | t5
    config_file: str  # the file the folder's architecture was read from (model_config.json or config.json)
    weights_file: str  # model.safetensors (or a Hugging Face pytorch_model.bin)
    tokenizer: str  # the folder's tokenizer.json (fine-tuning tokenizes with it)
    max_seq_len: int | None  # the model's positions; None: no limit of its own (T5's relative positions)
    model_type: str | None = None  # an "hf" folder's config.json model_type (gpt2, llama, bert, albert, ...)
    # the family config's fields, read from the checkpoint (pretrain.init_from only; the
    # workers build the model from them); None where the folder is loaded whole
    architecture: dict[str, Any] | None = None
