"""The BERT family as Hugging Face models: config.json's dict and the state dict, both
ways, per variant: bert (BertForPreTraining / BertModel, `convert.py`), albert
(AlbertForPreTraining / AlbertModel, `convert_albert.py`), electra (ElectraForPreTraining
with its generator, ElectraForMaskedLM, ElectraModel, `convert_electra.py`).
`stages/models/hf_export.py` writes and reads the folders (ELECTRA's generator is a
folder of its own inside the discriminator's).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn as nn

from stages.models.bert.convert import bert_config_from_hf, bert_to_hf_bert, hf_bert_config, hf_bert_to_bert
from stages.models.bert.convert_albert import (
    albert_config_from_hf, albert_to_hf_albert, hf_albert_config, hf_albert_to_albert,
)
from stages.models.bert.convert_electra import (
    TIED_GENERATOR_NAME, electra_config_from_hf, electra_to_hf_electra, hf_electra_config,
    hf_electra_pretraining_to_electra, hf_electra_to_electra,
)
from stages.models.bert.electra import ElectraForPreTraining, ElectraGenerator
from stages.models.bert.model import Bert, BertForPreTraining

HfModel = tuple[dict[str, Any], dict[str, torch.Tensor], list[str]]  # config, state, names HF ties
State = dict[str, torch.Tensor]


def bert_to_hf(model: Bert | BertForPreTraining | ElectraForPreTraining | ElectraGenerator) -> HfModel:
    """(config.json dict, HF state dict, names HF ties to another tensor)."""
    return _TO_HF[model.config.variant](model)


def _bert_to_hf(model: Bert | BertForPreTraining) -> HfModel:
    backbone_only = isinstance(model, Bert)
    architecture = "BertModel" if backbone_only else "BertForPreTraining"
    config = {"model_type": "bert", "architectures": [architecture], **hf_bert_config(model.config)}
    tied = [] if backbone_only else ["cls.predictions.decoder.weight"]
    return config, bert_to_hf_bert(model.state_dict(), model.config.num_layers, backbone_only), tied


def _albert_to_hf(model: Bert | BertForPreTraining) -> HfModel:
    backbone_only = isinstance(model, Bert)
    architecture = "AlbertModel" if backbone_only else "AlbertForPreTraining"
    config = {"model_type": "albert", "architectures": [architecture], **hf_albert_config(model.config),
              # the tokenizer's ids are not ALBERT's [CLS] 2 / [SEP] 3; nothing must guess
              "bos_token_id": None, "eos_token_id": None}
    tied = [] if backbone_only else ["predictions.decoder.weight"]
    return config, albert_to_hf_albert(model.state_dict(), model.config, backbone_only), tied


# ELECTRA's classes: (the part convert_electra names, the HF architecture, names HF ties)
_ELECTRA_PARTS = {ElectraForPreTraining: ("discriminator", "ElectraForPreTraining", []),
                  ElectraGenerator: ("generator", "ElectraForMaskedLM", [TIED_GENERATOR_NAME]),
                  Bert: ("model", "ElectraModel", [])}


def _electra_to_hf(model: Bert | ElectraForPreTraining | ElectraGenerator) -> HfModel:
    if type(model) not in _ELECTRA_PARTS:
        raise TypeError(f"export_hf: an ELECTRA model is exported as ElectraForPreTraining, ElectraGenerator "
                        f"or its Bert encoder, got {type(model).__name__}")
    part, architecture, tied = _ELECTRA_PARTS[type(model)]
    config = {"model_type": "electra", "architectures": [architecture], **hf_electra_config(model.config)}
    return config, electra_to_hf_electra(model.state_dict(), model.config, part), tied


_TO_HF = {"bert": _bert_to_hf, "albert": _albert_to_hf, "electra": _electra_to_hf}


def bert_from_hf(hf_config: dict[str, Any], state: State, source: str) -> tuple[nn.Module, State]:
    """BertForPreTraining (it has `cls.predictions`) or BertModel -> ours and its state dict."""
    config = bert_config_from_hf(hf_config)
    pretraining = any(k.startswith("cls.predictions") for k in state)
    model = BertForPreTraining(config) if pretraining else Bert(config)
    return model, hf_bert_to_bert(state, config.num_layers, backbone_only=not pretraining)


def albert_from_hf(hf_config: dict[str, Any], state: State, source: str) -> tuple[nn.Module, State]:
    """AlbertForPreTraining (it has `predictions.`) or AlbertModel -> ours and its state dict."""
    config = albert_config_from_hf(hf_config, source=source)
    pretraining = any(k.startswith("predictions.") for k in state)
    model = BertForPreTraining(config) if pretraining else Bert(config)
    return model, hf_albert_to_albert(state, config, backbone_only=not pretraining)


def is_electra_pretraining(state: State) -> bool:
    """An ElectraForPreTraining state dict (the discriminator, whose generator is a model of its own)."""
    return any(k.startswith("discriminator_predictions.") for k in state)


def electra_from_hf(hf_config: dict[str, Any], state: State, source: str,
                    generator: tuple[dict[str, Any], State] | None = None) -> tuple[nn.Module, State]:
    """ElectraForPreTraining (with generator: its config.json dict and state dict) ->
    ElectraForPreTraining, ElectraForMaskedLM -> ElectraGenerator, ElectraModel -> Bert."""
    if any(k.startswith("generator_predictions.") for k in state):
        config = electra_config_from_hf(hf_config, source)
        return ElectraGenerator(config), hf_electra_to_electra(state, config, "generator")
    if not is_electra_pretraining(state):
        config = electra_config_from_hf(hf_config, source)
        return Bert(config), hf_electra_to_electra(state, config, "model")
    generator_config, generator_state = generator
    config = electra_config_from_hf(hf_config, source, generator=generator_config)
    return ElectraForPreTraining(config), hf_electra_pretraining_to_electra(state, generator_state, config)
