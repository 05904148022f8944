"""Convert ELECTRA (variant "electra" of the BERT family) weights and configs to and from
Hugging Face: the discriminator as `ElectraForPreTraining`, the generator as
`ElectraForMaskedLM`, a bare discriminator encoder as `ElectraModel`. Torch only.

    # one module of ours <-> one Hugging Face model ("part")
    hf_state = electra_to_hf_electra(model.state_dict(), model.config, "discriminator")
    hf_state = electra_to_hf_electra(model.generator.state_dict(), model.generator.config, "generator")
    hf_state = electra_to_hf_electra(bert.state_dict(), bert.config, "model")   # a Bert, variant electra
    hf_model = ElectraForPreTraining(ElectraConfig(**hf_electra_config(model.config)))
    hf_model.load_state_dict(hf_state, strict=False)   # HF adds non-persistent buffers

    # both Hugging Face models -> our ElectraForPreTraining (loads strictly)
    config = electra_config_from_hf(discriminator_json, generator=generator_json)
    state = hf_electra_pretraining_to_electra(discriminator_state, generator_state, config)

    # ... as one dict (the generator's names under "generator."): what pretrain.init_from reads
    hf_state = electra_to_hf_pretraining(model.state_dict(), config)
    state = hf_pretraining_to_electra(hf_state, config)

Google publishes ELECTRA as two checkpoints, each with a copy of the embeddings the two
networks share; ours hold one. Reading a pair takes the discriminator's copy and refuses
a pair whose copies differ (two networks that were not trained together). Layers are
named as in BERT; our attention fuses query/key/value into one projection.
"""

from __future__ import annotations

from typing import Any

import torch

from stages.models.bert.config import BertConfig
from stages.models.bert.convert import _BLOCK_NAMES as BERT_BLOCK_NAMES
from stages.models.bert.convert import _EMBEDDING_NAMES as BERT_EMBEDDING_NAMES
from stages.models.bert.convert import hf_bert_config
from stages.models.bert.electra import generator_config

PARTS = ("discriminator", "generator", "model")
# BERT's embedding names; ELECTRA has no pooler.
_EMBEDDING_NAMES = [(ours, theirs) for ours, theirs in BERT_EMBEDDING_NAMES if not ours.startswith("pooler.")]
_PROJECTION_NAMES = [  # only when embedding_size != hidden_size
    ("embedding_projection.weight", "embeddings_project.weight"),
    ("embedding_projection.bias", "embeddings_project.bias"),
]
_BLOCK_NAMES = BERT_BLOCK_NAMES  # ELECTRA's encoder layers are BERT's, name for name
_DISCRIMINATOR_HEAD_NAMES = [
    ("discriminator_transform.weight", "discriminator_predictions.dense.weight"),
    ("discriminator_transform.bias", "discriminator_predictions.dense.bias"),
    ("discriminator_prediction.weight", "discriminator_predictions.dense_prediction.weight"),
    ("discriminator_prediction.bias", "discriminator_predictions.dense_prediction.bias"),
]
_GENERATOR_HEAD_NAMES = [
    ("mlm_transform.weight", "generator_predictions.dense.weight"),
    ("mlm_transform.bias", "generator_predictions.dense.bias"),
    ("mlm_norm.weight", "generator_predictions.LayerNorm.weight"),
    ("mlm_norm.bias", "generator_predictions.LayerNorm.bias"),
    ("mlm_decoder.weight", "generator_lm_head.weight"),
    ("mlm_bias", "generator_lm_head.bias"),
]
_QKV = ("query", "key", "value")
# Hugging Face stores the generator's tied decoder once, as the word embedding.
TIED_GENERATOR_NAME = "generator_lm_head.weight"
GENERATOR_PREFIX = "generator."  # our generator's names in ElectraForPreTraining (and in one-dict conversions)


def _name_pairs(config: BertConfig, part: str) -> list[tuple[str, str | list[str]]]:
    """(ours, HF) for every tensor of the part's module of ours: ElectraForPreTraining
    (discriminator), ElectraGenerator (generator) or Bert (model); q/k/v as a list."""
    if config.variant != "electra":
        raise ValueError(f"convert_electra converts variant 'electra' BERTs, got {config.variant!r}; "
                         "BERT ones convert with stages.models.bert.convert")
    if part not in PARTS:
        raise ValueError(f"part must be one of {PARTS}, got {part!r}")
    ours_prefix, hf_prefix = ("", "") if part == "model" else ("backbone.", "electra.")
    names = list(_EMBEDDING_NAMES)
    if config.embedding_size != config.hidden_size:
        names += _PROJECTION_NAMES
    pairs: list[tuple[str, str | list[str]]] = [(ours_prefix + o, hf_prefix + h) for o, h in names]
    for i in range(config.num_layers):
        ours, theirs = f"{ours_prefix}blocks.{i}.", f"{hf_prefix}encoder.layer.{i}."
        pairs += [(ours + o, theirs + h) for o, h in _BLOCK_NAMES]
        pairs += [(f"{ours}attn.qkv_proj.{p}", [f"{theirs}attention.self.{n}.{p}" for n in _QKV])
                  for p in ("weight", "bias")]
    if part == "discriminator":
        pairs += _DISCRIMINATOR_HEAD_NAMES
    if part == "generator":
        pairs += _GENERATOR_HEAD_NAMES
    return pairs


def electra_to_hf_electra(state_dict: dict[str, torch.Tensor], config: BertConfig,
                          part: str = "discriminator") -> dict[str, torch.Tensor]:
    """Our module's state dict -> the Hugging Face model of `part`: ElectraForPreTraining
    -> ElectraForPreTraining, ElectraGenerator -> ElectraForMaskedLM, Bert ->
    ElectraModel. `config` is that module's (the generator's own for "generator").
    Tensors are copies."""
    hf: dict[str, torch.Tensor] = {}
    for ours, theirs in _name_pairs(config, part):
        if isinstance(theirs, list):  # our fused q/k/v -> query, key, value
            for name, chunk in zip(theirs, state_dict[ours].chunk(3, dim=0), strict=True):
                hf[name] = chunk.clone()
        else:
            hf[theirs] = state_dict[ours].clone()
    return hf


def hf_electra_to_electra(state_dict: dict[str, torch.Tensor], config: BertConfig,
                          part: str = "discriminator") -> dict[str, torch.Tensor]:
    """A Hugging Face model's state dict -> our module of `part` (loads with strict=True).
    An ElectraModel's names may lack the "electra." prefix of the task models'."""
    state_dict = dict(state_dict)
    if part == "model" and any(k.startswith("electra.") for k in state_dict):
        state_dict = {k.removeprefix("electra."): v for k, v in state_dict.items()}
    if part == "generator" and TIED_GENERATOR_NAME not in state_dict:  # tied: stored once
        state_dict[TIED_GENERATOR_NAME] = state_dict["electra.embeddings.word_embeddings.weight"]

    def get(name: str) -> torch.Tensor:
        if name not in state_dict:
            raise KeyError(f"Hugging Face ELECTRA {part} state dict has no {name!r}")
        return state_dict[name]

    return {ours: torch.cat([get(n) for n in theirs]) if isinstance(theirs, list) else get(theirs).clone()
            for ours, theirs in _name_pairs(config, part)}


def hf_electra_pretraining_to_electra(discriminator: dict[str, torch.Tensor], generator: dict[str, torch.Tensor],
                                      config: BertConfig) -> dict[str, torch.Tensor]:
    """Hugging Face ElectraForPreTraining + ElectraForMaskedLM state dicts -> our
    ElectraForPreTraining (loads with strict=True). The shared embeddings come from the
    discriminator; a generator whose copy differs is refused."""
    ours = hf_electra_to_electra(discriminator, config, "discriminator")
    theirs = hf_electra_to_electra(generator, generator_config(config), "generator")
    for name, _ in _EMBEDDING_NAMES:
        if not torch.equal(theirs[f"backbone.{name}"], ours[f"backbone.{name}"]):
            raise ValueError(
                f"the generator's {name} differs from the discriminator's: ELECTRA's two networks share "
                "their embeddings, so these checkpoints were not trained together")
    ours.update({GENERATOR_PREFIX + name: tensor for name, tensor in theirs.items()})
    ours.update({f"{GENERATOR_PREFIX}backbone.{name}": ours[f"backbone.{name}"] for name, _ in _EMBEDDING_NAMES})
    return ours


def hf_electra_config(config: BertConfig) -> dict[str, Any]:
    """Keyword arguments for transformers.ElectraConfig describing the model of `config`
    (pass the generator's own config, `ElectraGenerator.config`, for the generator)."""
    return {**hf_bert_config(config), "embedding_size": config.embedding_size}


def electra_config_from_hf(hf_config: dict[str, Any], source: str = "config.json",
                           generator: dict[str, Any] | None = None) -> BertConfig:
    """Our BertConfig (variant electra) from a Hugging Face ELECTRA config.json dict: the
    discriminator's, with generator_size from the generator's config.json when given (it
    must be the discriminator scaled by one ratio, as ours are). Refuses what our encoder
    does not implement rather than converting it wrongly."""
    activation = hf_config.get("hidden_act", "gelu")
    unsupported = {
        f"hidden_act {activation!r} (only 'gelu' and 'gelu_new')": activation not in ("gelu", "gelu_new"),
        "position_embedding_type other than 'absolute'":
            hf_config.get("position_embedding_type", "absolute") != "absolute",
    }
    refused = [name for name, bad in unsupported.items() if bad]
    if refused:
        raise ValueError(f"{source}: this ELECTRA uses {', '.join(refused)}, which the electra variant "
                         "does not implement; only plain ELECTRA checkpoints convert")
    fields = dict(
        variant="electra",
        vocab_size=hf_config["vocab_size"],
        max_seq_len=hf_config.get("max_position_embeddings", 512),
        num_layers=hf_config["num_hidden_layers"],
        hidden_size=hf_config["hidden_size"],
        embedding_size=hf_config.get("embedding_size", 128),
        num_heads=hf_config["num_attention_heads"],
        intermediate_size=hf_config["intermediate_size"],
        type_vocab_size=hf_config.get("type_vocab_size", 2),
        dropout=hf_config.get("hidden_dropout_prob", 0.1),
        layer_norm_eps=hf_config.get("layer_norm_eps", 1e-12),
        pad_token_id=hf_config.get("pad_token_id") or 0,
        hidden_act=activation,
    )
    if generator is None:
        return BertConfig(**fields)
    config = BertConfig(**fields, generator_size=generator["hidden_size"] / hf_config["hidden_size"])
    expected = hf_electra_config(generator_config(config))
    differ = [f"{key}={generator.get(key)!r} (ours: {expected[key]!r})"
              for key in ("vocab_size", "embedding_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                          "intermediate_size", "max_position_embeddings", "type_vocab_size")
              if generator.get(key) != expected[key]]
    if differ:
        raise ValueError(
            f"{source}: the generator is not the discriminator scaled by generator_size="
            f"{config.generator_size:.4g} ({'; '.join(differ)}); the electra variant builds its generator "
            "that way (same depth and embeddings, heads scaled alike, a 4x feed-forward)")
    return config


def electra_to_hf_pretraining(state_dict: dict[str, torch.Tensor], config: BertConfig) -> dict[str, torch.Tensor]:
    """Our ElectraForPreTraining state dict -> both Hugging Face models' tensors in one
    dict: ElectraForPreTraining's names, and ElectraForMaskedLM's under "generator."
    without the embeddings and tied decoder (the discriminator's tensors). What
    `pretrain.init_from` compares a discriminator checkpoint with."""
    hf = electra_to_hf_electra(state_dict, config, "discriminator")
    generator = {name.removeprefix(GENERATOR_PREFIX): tensor for name, tensor in state_dict.items()
                 if name.startswith(GENERATOR_PREFIX)}
    shared = {f"electra.{name}" for _, name in _EMBEDDING_NAMES} | {TIED_GENERATOR_NAME}
    hf.update({GENERATOR_PREFIX + name: tensor
               for name, tensor in electra_to_hf_electra(generator, generator_config(config), "generator").items()
               if name not in shared})
    return hf


def hf_pretraining_to_electra(state_dict: dict[str, torch.Tensor], config: BertConfig) -> dict[str, torch.Tensor]:
    """The inverse of `electra_to_hf_pretraining` (loads strictly into ElectraForPreTraining)."""
    discriminator = {name: t for name, t in state_dict.items() if not name.startswith(GENERATOR_PREFIX)}
    generator = {name.removeprefix(GENERATOR_PREFIX): t for name, t in state_dict.items()
                 if name.startswith(GENERATOR_PREFIX)}
    for _, name in _EMBEDDING_NAMES:
        generator.setdefault(f"electra.{name}", discriminator[f"electra.{name}"])
    return hf_electra_pretraining_to_electra(discriminator, generator, config)
