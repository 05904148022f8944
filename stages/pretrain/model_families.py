"""The sections of `pretrain.model`, one per family (stages/pretrain/model_config.py joins
them into the union on `family`). A family's section has the shared keys and its own; it
writes no family or variant rule: its validator builds the family's config dataclass
(stages/models/<family>/config.py, torch-free) from the section's architecture, so each rule
is checked in one place, with one message. Presets expand here, from the table beside
those configs."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, Field, create_model, field_validator, model_serializer, model_validator

from stages.models.config import FIELDS_FROM_DATA, family_config, preset_shape
from stages.models.config_checks import check_heads_divide
from stages.section import Section

# Every key of the section, in the order dumps (config.yaml) and `pretrain config` list
# them: the order of the one flat section this union replaced.
KEY_ORDER = ("preset", "family", "num_layers", "hidden_size", "num_heads", "pad_vocab_to_multiple_of",
             "dropout", "layer_norm_eps", "variant", "num_kv_heads", "rope_theta", "intermediate_size",
             "ff_size", "head_size", "num_decoder_layers", "feed_forward", "tie_word_embeddings",
             "embedding_size", "share_layers", "span_boundary_objective", "generator_size", "rtd_weight")
# Keys added after pretrain fingerprints existed: left out of the dump while unset or off
# (None or False, which mean the same)
KEYS_DUMPED_ONLY_WHEN_SET = ("span_boundary_objective", "generator_size", "rtd_weight")
# layer_norm_eps when unset: each reference architecture's own value
DEFAULT_LAYER_NORM_EPS = {"gpt": 1e-5, "bert": 1e-12, "t5": 1e-6}
# ... where a variant's differs from its family's (torch.nn.Transformer's LayerNorm default)
VARIANT_LAYER_NORM_EPS = {"transformer": 1e-5}

# Keys two families share (the others belong to one section below)
IntermediateSize = Annotated[int | None, Field(
    ge=1, description="bert and gpt: feed-forward inner width; unset = 4 x hidden_size "
    "(gpt llama: 8/3 x hidden_size rounded up to a multiple of 256, Meta's rule)")]
TieWordEmbeddings = Annotated[bool | None, Field(
    description="t5 and gpt llama: share the LM head with the token embedding (t5 "
    "v1.0: true, v1.1: false); unset = true for t5 and gpt2 (which always ties), false for "
    "llama")]


class ModelSection(Section):
    """The keys every family has, and what every family's section does with them."""

    families: ClassVar[dict[str, type["ModelSection"]]] = {}  # family -> its section, filled below
    # Every family's keys as one flat section, for what lists keys (the README table, `pretrain
    # config`, the closest-key hint of an unknown key): stages.validation_errors.model_of
    # reads each family's section as this one. Filled below.
    all_families_keys: ClassVar[type[BaseModel]]

    preset: str | None = Field(
        None, description="a named shape from stages/models/<family>/config.py (gpt2-small, gpt2-medium, "
        "gpt2-large, bert-base, bert-large, albert-base, albert-large, albert-xlarge, "
        "electra-small, electra-base, t5-small, "
        "t5-base, t5-v1_1-small, transformer-base, transformer-big, ...): sets family and every "
        "architecture key (dropout included: the papers' 0.1, ALBERT's 0); keys given next to it override the preset's. The preset's "
        "vocab_size and max_seq_len are not used: they come from the dataset like every model's "
        "(set tokenizer.vocab_size and dataset.seq_len to the paper's, as configs/gpt2-small.yaml "
        "does)")
    family: Literal["gpt", "bert", "t5"] = Field(
        "gpt", description="model family, which fixes the pretraining objective: 'gpt' = GPT-2 "
        "decoder (pre-LN, learned positions, tied LM head; or Llama's with variant: llama) "
        "trained on clm; 'bert' = BERT encoder "
        "with MLM + NSP/SOP heads trained on mlm (or ALBERT's with variant: albert, or ELECTRA's "
        "discriminator and generator trained by replaced-token detection with variant: electra); "
        "'t5' = T5 "
        "encoder-decoder trained on span (or the original Transformer's with variant: transformer)")
    num_layers: int = Field(2, ge=1, description="number of Transformer blocks (t5: encoder blocks)")
    hidden_size: int = Field(128, ge=8, description="residual stream width (d_model)")
    num_heads: int = Field(4, ge=1, description="attention heads; must divide hidden_size")
    pad_vocab_to_multiple_of: int = Field(
        1, ge=1, description="round the embedding and LM head up to a multiple of this many rows "
        "(Megatron's --make-vocab-size-divisible-by): GPU matrix kernels have no fast tiles for "
        "sizes like GPT-2's 50257, and 64 or 128 made gpt2-small 1.4x faster on an H100 "
        "(benchmarks/gpu_mfu.py). The extra rows are never a target, so training pushes their "
        "logits down; 1 = exactly the tokenizer's vocabulary")
    dropout: float = Field(0.0, ge=0, lt=1, description="dropout on embeddings, attention and MLP outputs")
    layer_norm_eps: float | None = Field(
        None, gt=0, description="LayerNorm (t5, gpt llama: RMSNorm) epsilon; unset = the family's own "
        "(gpt 1e-5, bert 1e-12, t5 1e-6, t5 variant transformer 1e-5)")
    variant: Literal["gpt2", "llama", "bert", "albert", "electra", "t5", "transformer"] | None = Field(
        None, description="gpt: 'gpt2' (LayerNorm, learned positions, GELU MLP, biases, tied "
        "head) or 'llama' (RMSNorm, rotary positions, SwiGLU MLP, grouped-query attention, no "
        "biases, untied head; converts to Hugging Face LlamaForCausalLM); unset = gpt2. bert: "
        "'bert' or 'albert' (Lan et al. 2020: factorized embeddings, embedding_size 128 unless "
        "set, one layer shared by all num_layers unless share_layers says otherwise, tanh GELU; "
        "trains mlm + sop with dataset.mlm.sentence_task: sop; converts to Hugging Face "
        "AlbertForPreTraining) or 'electra' (Clark et al. 2020: a discriminator trained by "
        "replaced-token detection with a generator generator_size as wide trained jointly by MLM, "
        "sharing its embeddings, no pooler; embedding_size may differ from hidden_size; trains on "
        "the mlm dataset with dataset.mlm.sentence_task: none; fine-tunes the discriminator; "
        "converts to Hugging Face ElectraForPreTraining + ElectraForMaskedLM); unset = bert. t5: "
        "'t5' or 'transformer' (Vaswani et al. 2017: "
        "post-LN with LayerNorm, sinusoidal positions, one embedding matrix for source, target "
        "and output scaled by sqrt(hidden_size), ReLU feed-forward, biases; no relative "
        "attention, gated-gelu, untied head or head_size other than hidden_size / num_heads; "
        "trains on span like T5, no Hugging Face export); unset = t5")

    @model_validator(mode="before")
    @classmethod
    def _keys_of_this_family(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        return cls._without_other_families_keys(cls._fill_from_preset(data))

    @classmethod
    def _fill_from_preset(cls, data: dict) -> dict:
        # The keys present here are the ones the user gave (YAML or -o): the preset fills the
        # rest. A config dumped after validation (what training workers get) has every key,
        # so filling again changes nothing.
        if not isinstance(data.get("preset"), str):
            return data
        try:
            family, fields = preset_shape(data["preset"])
        except ValueError:
            return data  # unknown name: _preset_exists names the close match
        given_family = data.get("family")
        if given_family is not None and given_family != family:
            raise ValueError(
                f"preset {data['preset']!r} is a {family!r} model but family is {given_family!r}; "
                f"remove pretrain.model.family (the preset sets it) or pick a {given_family} preset")
        from_preset = {name: value for name, value in fields.items() if name in KEY_ORDER and name not in data}
        return {**from_preset, **data, "family": family}

    @classmethod
    def _without_other_families_keys(cls, data: dict) -> dict:
        # The flat dump gives every family's keys, unset (None) where another family's:
        # those are dropped; a value given to a key this family lacks is refused.
        others = [name for name in KEY_ORDER if name in data and name not in cls.model_fields]
        misplaced = sorted(name for name in others if data[name] is not None)
        if misplaced:
            which = ", ".join(f"{name} ({' and '.join(_owners(name))} only)" for name in misplaced)
            raise ValueError(
                f"family={cls.model_fields['family'].default!r} does not use {which}; remove them or set the "
                f"family they belong to")
        return {name: value for name, value in data.items() if name not in others}

    @field_validator("preset")
    @classmethod
    def _preset_exists(cls, name: str | None) -> str | None:
        if name is not None:
            preset_shape(name)  # ValueError: "unknown model preset ...; did you mean ...?"
        return name

    @model_validator(mode="after")
    def _the_family_config_accepts_it(self) -> "ModelSection":
        # Every family and variant rule, checked where the model reads it; the sizes the
        # dataset decides are placeholders here.
        family_config(self.architecture(), source="pretrain.model", vocab_size=1, max_seq_len=1)
        return self

    @model_serializer(mode="wrap")
    def _one_flat_record(self, handler):
        # The dump is the fingerprint's input, and it is the record it was when one flat
        # section held every family's keys: the other families' keys appear unset, and a
        # config that does not use a key added later keeps the fingerprint (and cached
        # pretraining) it had before the key existed.
        dumped = handler(self)
        flat = {name: dumped.get(name) for name in KEY_ORDER
                if name in dumped or name not in type(self).model_fields}
        for key in KEYS_DUMPED_ONLY_WHEN_SET:
            if flat.get(key) in (None, False):
                flat.pop(key, None)
        return flat

    def architecture(self) -> dict[str, Any]:
        """The fields of the family's model config (stages.models.build_model's input):
        family, the shared fields, and this family's own fields with their defaults; with a
        preset, also its fields that have no key here (e.g. t5's
        relative_attention_num_buckets), except those the dataset sets."""
        return {**self._preset_extras(),
                "family": self.family, "num_layers": self.num_layers, "hidden_size": self.hidden_size,
                "num_heads": self.num_heads, "dropout": self.dropout,
                "layer_norm_eps": (self.layer_norm_eps or VARIANT_LAYER_NORM_EPS.get(self.variant)
                                   or DEFAULT_LAYER_NORM_EPS[self.family]),
                **self._own_architecture()}

    def _own_architecture(self) -> dict[str, Any]:
        raise NotImplementedError  # each family's section

    def _preset_extras(self) -> dict[str, Any]:
        if self.preset is None:
            return {}
        _, fields = preset_shape(self.preset)
        return {name: value for name, value in fields.items()
                if name not in KEY_ORDER and name not in FIELDS_FROM_DATA}

    def _set(self, names: tuple[str, ...]) -> dict[str, Any]:
        """`names` that are set: the family config fills in each variant's own defaults."""
        return {name: getattr(self, name) for name in names if getattr(self, name) is not None}


def _owners(name: str) -> list[str]:
    return [family for family, section in ModelSection.families.items() if name in section.model_fields]


class GptModelConfig(ModelSection):
    family: Literal["gpt"] = "gpt"
    num_kv_heads: int | None = Field(
        None, ge=1, description="gpt llama only: key/value heads of grouped-query attention, a "
        "divisor of num_heads (1 = multi-query); unset = num_heads (plain multi-head)")
    rope_theta: float | None = Field(
        None, gt=0, description="gpt llama only: base of the rotary position frequencies; unset "
        "= 10000 (Llama 1/2)")
    intermediate_size: IntermediateSize = None
    tie_word_embeddings: TieWordEmbeddings = None

    def _own_architecture(self) -> dict[str, Any]:
        return self._set(("variant", "num_kv_heads", "intermediate_size", "rope_theta", "tie_word_embeddings"))


class BertModelConfig(ModelSection):
    family: Literal["bert"] = "bert"
    intermediate_size: IntermediateSize = None
    embedding_size: int | None = Field(
        None, ge=1, description="bert albert and electra only: width E of the word, position and "
        "token-type embeddings, projected to hidden_size before the first layer and back to E by "
        "the MLM head (ALBERT's factorized embedding: V x E + E x H parameters instead of V x H); "
        "unset = 128 (albert), hidden_size (electra; electra-small uses 128)")
    share_layers: Literal["none", "all", "attention", "ffn"] | None = Field(
        None, description="bert albert only: cross-layer parameter sharing. 'all' = one layer's "
        "weights applied num_layers times (ALBERT), 'attention' / 'ffn' = only that sublayer "
        "shared (the paper's ablations; these two do not convert to Hugging Face), 'none' = "
        "every layer its own (as BERT); unset = all")
    span_boundary_objective: bool | None = Field(
        None, description="bert only: add SpanBERT's span boundary objective (Joshi et al. 2020, "
        "section 3.2; pair it with dataset.mlm.mask_unit: span): a head predicts each masked "
        "token again from the hidden states of the two tokens just outside its span and its "
        "position in the span (a 2-layer GELU + LayerNorm feed-forward, then the tied MLM "
        "decoder); its cross-entropy (metric part sbo) is added to the MLM loss. Spans are the "
        "runs of masked positions, so two spans that touch count as one. Hugging Face has no "
        "such head: the hf/ export leaves it out (the encoder and MLM head convert as BERT's); "
        "unset = off")
    generator_size: float | None = Field(
        None, gt=0, le=1, description="bert electra only: the generator's hidden size and heads as "
        "a fraction of the discriminator's (same depth and embeddings, feed-forward 4 x its hidden "
        "size); the paper found 1/4 to 1/2 best (electra-small 1/4, electra-base 1/3): a generator "
        "as strong as the discriminator makes the detection task too hard; unset = 0.25")
    rtd_weight: float | None = Field(
        None, gt=0, description="bert electra only: lambda, the weight of the discriminator's "
        "replaced-token-detection loss (a mean binary cross-entropy over the real tokens) added "
        "to the generator's MLM loss (a mean over the masked tokens); unset = 50 (the paper's). "
        "The logged loss and val_loss are the trained total (rtd weighted by this); rtd_loss and "
        "mlm_loss are logged unweighted")

    def _own_architecture(self) -> dict[str, Any]:
        return {"intermediate_size": self.intermediate_size or 4 * self.hidden_size,
                **self._set(("variant", "embedding_size", "share_layers", "span_boundary_objective",
                             "generator_size", "rtd_weight"))}


class T5ModelConfig(ModelSection):
    family: Literal["t5"] = "t5"
    ff_size: int | None = Field(
        None, ge=1, description="t5 only: feed-forward inner width (d_ff); unset = 4 x hidden_size")
    head_size: int | None = Field(
        None, ge=1, description="t5 only: width of each attention head (d_kv); unset = "
        "hidden_size / num_heads")
    num_decoder_layers: int | None = Field(
        None, ge=1, description="t5 only: decoder blocks; unset = num_layers")
    feed_forward: Literal["relu", "gated-gelu"] | None = Field(
        None, description="t5 only: 'relu' (T5 v1.0) or 'gated-gelu' (T5 v1.1); unset = relu")
    tie_word_embeddings: TieWordEmbeddings = None

    @model_validator(mode="after")
    def _heads_divide(self) -> "T5ModelConfig":
        if self.head_size is None:
            # architecture() makes head_size hidden_size / num_heads; a T5 that sets head_size
            # needs no divisor (T5 v1.1 small: 6 heads of 64 on 512)
            check_heads_divide(self.hidden_size, self.num_heads)
        return self

    def _own_architecture(self) -> dict[str, Any]:
        return {"ff_size": self.ff_size or 4 * self.hidden_size,
                "head_size": self.head_size or self.hidden_size // self.num_heads,
                "num_decoder_layers": self.num_decoder_layers or self.num_layers,
                "feed_forward": self.feed_forward or "relu",
                "tie_word_embeddings": True if self.tie_word_embeddings is None else self.tie_word_embeddings,
                # unset stays out: T5 fingerprints as before variants existed
                **self._set(("variant",))}


ModelSection.families.update(gpt=GptModelConfig, bert=BertModelConfig, t5=T5ModelConfig)


def _all_families_keys() -> type[BaseModel]:
    owner = {name: section for section in (ModelSection, *reversed(ModelSection.families.values()))
             for name in section.model_fields}  # each key's field where it is declared
    owner["family"] = ModelSection  # its description and the three values
    return create_model("ModelConfig", __base__=Section, **{
        name: (owner[name].model_fields[name].annotation, owner[name].model_fields[name]) for name in KEY_ORDER})


ModelSection.all_families_keys = _all_families_keys()
