"""Build the model a checkpoint folder describes and copy its weights in (worker side of
`pretrain.init_from`; the driver resolved the folder: stages/pretrain/init_from.py).

    model = build_initial_model(source, token_ids)      # the checkpoint's architecture
    fresh = load_initial_weights(model, source)         # names the checkpoint lacks

A Hugging Face checkpoint is converted through the same name maps as export and import
(stages/models/gpt/convert*.py). What it lacks is filled from the freshly initialised model
first, so that a BertModel (MiniLM, sentence-transformers checkpoints) or a
BertForMaskedLM starts BERT pretraining with new MLM / NSP heads and pooler (ALBERT's
AlbertModel / AlbertForMaskedLM likewise; ELECTRA's ElectraForPreTraining / ElectraModel
with a new generator, and a new discriminator head for ElectraModel); any other
missing tensor is an error, as is a tensor of another shape.
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn as nn

from stages.models.build import build_model
from stages.models.gpt.convert import gpt_to_hf_gpt2, hf_gpt2_to_gpt
from stages.models.bert.convert_albert import albert_to_hf_albert, hf_albert_to_albert
from stages.models.bert.convert import bert_to_hf_bert, hf_bert_to_bert
from stages.models.bert.convert_electra import electra_to_hf_pretraining, hf_pretraining_to_electra
from stages.models.gpt.convert_llama import gpt_to_hf_llama, hf_llama_to_gpt
from stages.models.t5.convert import hf_t5_to_t5, t5_to_hf_t5
from stages.models.weights_file import load_weights_into, read_weights
from stages.training.model_source import ModelSource

# family -> (ours -> HF, HF -> ours, HF names tied to another tensor, HF name prefixes a
# checkpoint may lack: those start from the fresh initialisation)
_CONVERSIONS = {
    # GPT-2 or Llama, by the config's variant
    "gpt": (lambda s, c: gpt_to_hf_llama(s, c) if _is_llama(c) else gpt_to_hf_gpt2(s, c.num_layers),
            lambda s, c: hf_llama_to_gpt(s, c) if _is_llama(c) else hf_gpt2_to_gpt(s, c.num_layers),
            lambda c: {"lm_head.weight"} if not _is_llama(c) or c.tie_word_embeddings else set(), ()),
    # BERT or ALBERT, by the config's variant (each one's heads and pooler may be missing)
    "bert": (lambda s, c: albert_to_hf_albert(s, c) if _is_albert(c) else bert_to_hf_bert(s, c.num_layers),
             lambda s, c: hf_albert_to_albert(s, c) if _is_albert(c) else hf_bert_to_bert(s, c.num_layers),
             lambda c: {"predictions.decoder.weight", "predictions.decoder.bias"} if _is_albert(c)
             else {"cls.predictions.decoder.weight", "cls.predictions.decoder.bias"},
             ("cls.", "bert.pooler.", "predictions.", "sop_classifier.", "albert.pooler.")),
    # ELECTRA (bert variant electra): a discriminator folder; the generator it lacks starts fresh
    "electra": (electra_to_hf_pretraining, hf_pretraining_to_electra, lambda c: set(),
                ("generator.", "discriminator_predictions.")),
    "t5": (t5_to_hf_t5, hf_t5_to_t5,
           lambda c: {"encoder.embed_tokens.weight", "decoder.embed_tokens.weight"}
           | ({"lm_head.weight"} if c.tie_word_embeddings else set()), ()),
}


def build_initial_model(source: ModelSource, token_ids: dict[str, int]) -> nn.Module:
    """A freshly initialised model of the checkpoint's architecture; the data's special
    token ids win (they describe the rows the model is trained on)."""
    architecture = {"family": source.family, **source.architecture}
    return build_model(architecture, vocab_size=architecture["vocab_size"], **token_ids)


def load_initial_weights(model: nn.Module, source: ModelSource) -> list[str]:
    """Copy the checkpoint's weights into `model`; returns the checkpoint's (Hugging Face)
    names of the tensors it lacked, which keep their fresh initialisation."""
    weights_file = Path(source.weights_file)
    if source.format == "pretrained":
        load_weights_into(model, weights_file)  # errors name the file
        return []
    conversion = "electra" if _is_electra(model.config) else source.family
    to_hf, from_hf, tied_names, optional = _CONVERSIONS[conversion]
    checkpoint = _normalised_names(source.family, read_checkpoint_weights(weights_file), model.config)
    tied = tied_names(model.config)
    expected = {name: tensor for name, tensor in to_hf(model.state_dict(), model.config).items() if name not in tied}
    missing = sorted(set(expected) - set(checkpoint))
    required = [name for name in missing if not name.startswith(optional)]
    if required:
        raise ValueError(
            f"{weights_file}: lacks {len(required)} tensors that {source.config_file} describes (e.g. "
            f"{', '.join(required[:4])}); the folder's config and weights do not belong together")
    wrong_shape = [f"{name} {tuple(checkpoint[name].shape)} (model: {tuple(tensor.shape)})"
                   for name, tensor in expected.items() if name in checkpoint and checkpoint[name].shape != tensor.shape]
    if wrong_shape:
        raise ValueError(
            f"{weights_file}: tensors of other shapes than {source.config_file} describes: "
            f"{'; '.join(wrong_shape[:4])}; the folder's config and weights do not belong together")
    merged = {**expected, **{name: tensor for name, tensor in checkpoint.items() if name in expected or name in tied}}
    model.load_state_dict(from_hf(merged, model.config), strict=True)
    return missing


def read_checkpoint_weights(path: Path) -> dict[str, torch.Tensor]:
    if path.suffix == ".safetensors":
        return read_weights(path)
    try:  # weights_only: a pickle from elsewhere runs no code
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # noqa: BLE001 - any unreadable file gets the same message
        raise ValueError(f"{path}: not a readable PyTorch state dict ({type(error).__name__}: {error})") from error


def _is_llama(config) -> bool:
    return getattr(config, "variant", None) == "llama"


def _is_albert(config) -> bool:
    return getattr(config, "variant", None) == "albert"


def _is_electra(config) -> bool:
    return getattr(config, "variant", None) == "electra"


def _normalised_names(family: str, state: dict[str, torch.Tensor], config) -> dict[str, torch.Tensor]:
    """Base models (GPT2Model, LlamaModel, BertModel) save without their task models' prefix."""
    if family == "gpt" and _is_llama(config):
        if any(name.startswith("model.") for name in state):
            return state
        return {name if name.startswith("lm_head") else f"model.{name}": t for name, t in state.items()}
    if family == "gpt" and not any(name.startswith("transformer.") for name in state):
        return {name if name.startswith("lm_head") else f"transformer.{name}": t for name, t in state.items()}
    if family == "bert" and _is_electra(config):
        if any(name.startswith(("electra.", "generator.")) for name in state):
            return state
        return {f"electra.{name}": t for name, t in state.items()}
    if family == "bert" and _is_albert(config):
        if any(name.startswith("albert.") for name in state):
            return state
        return {name if name.startswith(("predictions.", "sop_classifier.")) else f"albert.{name}": t
                for name, t in state.items()}
    if family == "bert" and not any(name.startswith("bert.") for name in state):
        return {name if name.startswith("cls.") else f"bert.{name}": t for name, t in state.items()}
    return state
