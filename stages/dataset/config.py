"""Config of the dataset stage: how documents become fixed-length training examples.

Only pydantic here: the engine loads this module at startup to validate the YAML.
One small section per objective (`mlm`, `span`); the stage reads only the one its
`objective` names.
"""

from typing import Literal

from pydantic import Field, model_serializer, model_validator

from stages.section import Section

SPAN_KEYS = ("mask_unit", "span_geometric_p", "max_span_words")


class MlmConfig(Section):
    """BERT sentence-pair examples and masking (objective mlm)."""

    sentence_task: Literal["nsp", "sop", "none"] = Field(
        "nsp", description="nsp: B is the true continuation of A 50% of the time, a segment of "
        "another document otherwise (BERT); sop: A and B are consecutive, swapped 50% (ALBERT); "
        "none: one segment of consecutive sentences, no pair label (RoBERTa)")
    short_seq_prob: float = Field(
        0.1, ge=0, le=1, description="probability that an example's target length is drawn "
        "uniformly from [2, seq_len - 3] instead of filling seq_len (BERT: 0.1)")
    mask_prob: float = Field(
        0.15, gt=0, lt=1, description="share of the maskable (non-special) tokens of each "
        "example chosen for prediction (rounded, at least one)")
    mask_token_prob: float = Field(
        0.8, ge=0, le=1, description="of the chosen tokens: share replaced by [MASK]")
    random_token_prob: float = Field(
        0.1, ge=0, le=1, description="of the chosen tokens: share replaced by a random "
        "non-special token; the rest (1 - mask_token_prob - random_token_prob) stay unchanged")
    whole_word_masking: bool = Field(
        False, description="choose whole words (a word's first token and its continuation "
        "pieces together) instead of single tokens")
    mask_unit: Literal["token", "whole_word", "span"] = Field(
        "token", description="what is masked: token: single tokens (BERT); whole_word: whole "
        "words, as whole_word_masking: true (the older spelling); span: SpanBERT's contiguous "
        "spans of whole words, lengths from a geometric distribution (span_geometric_p, "
        "max_span_words), [MASK]/random/unchanged decided per span. A unit, orthogonal to "
        "`masking` (when masks are drawn): every unit works with static and dynamic masking")
    span_geometric_p: float = Field(
        0.2, gt=0, le=1, description="mask_unit: span: parameter p of the geometric "
        "distribution of span lengths in words (SpanBERT: 0.2, mean 3.8 words with "
        "max_span_words: 10)")
    max_span_words: int = Field(
        10, ge=1, le=64, description="mask_unit: span: longest span in words; the geometric "
        "distribution is truncated there and renormalized (SpanBERT: 10)")
    masking: Literal["static", "dynamic"] = Field(
        "dynamic", description="static: masks drawn once at build time and stored (BERT, with "
        "dupe_factor copies); dynamic: the loader draws fresh masks every epoch from (seed, "
        "epoch, example index) (RoBERTa)")
    dupe_factor: int = Field(
        1, ge=1, le=100, description="static masking: build the examples this many times, "
        "each with other pairings and masks (BERT: 10)")

    @model_validator(mode="after")
    def _shares_fit(self) -> "MlmConfig":
        if self.mask_token_prob + self.random_token_prob > 1:
            raise ValueError(
                f"mask_token_prob={self.mask_token_prob} + random_token_prob="
                f"{self.random_token_prob} exceeds 1; lower one of them (BERT: 0.8 and 0.1)")
        if self.masking == "dynamic" and self.dupe_factor > 1:
            raise ValueError(
                f"dupe_factor={self.dupe_factor} only applies to masking: static (dynamic "
                f"masking already draws new masks every epoch); set dupe_factor: 1 or "
                f"masking: static")
        return self

    @model_validator(mode="after")
    def _span_settings_fit(self) -> "MlmConfig":
        if self.mask_unit != "span":
            for key in SPAN_KEYS[1:]:
                if getattr(self, key) != type(self).model_fields[key].default:
                    raise ValueError(f"{key} only applies to mask_unit: span; set "
                                     f"mask_unit: span or remove {key}")
            return self
        if self.whole_word_masking:
            raise ValueError("whole_word_masking: true and mask_unit: span both choose the "
                             "masked unit (spans are already whole words); remove "
                             "whole_word_masking")
        return self

    @property
    def unit(self) -> str:
        """The masked unit, whichever key chose it: token, whole_word or span."""
        return "whole_word" if self.whole_word_masking else self.mask_unit

    @model_serializer(mode="wrap")
    def _unit_as_before(self, handler):
        # The dump is the fingerprint's input and the loader's index: token and whole-word
        # masking dump as they did before mask_unit existed (same fingerprints, same
        # cached datasets, whole_word_masking as the loader reads it).
        dumped = handler(self)
        if self.mask_unit != "span":
            for key in SPAN_KEYS:
                dumped.pop(key, None)
            dumped["whole_word_masking"] = self.unit == "whole_word"
        return dumped


class SpanConfig(Section):
    """T5 span corruption (objective span)."""

    noise_density: float = Field(
        0.15, gt=0, lt=1, description="share of each chunk's tokens replaced by sentinels (T5: 0.15)")
    mean_noise_span_length: float = Field(
        3.0, ge=1, description="average length of a corrupted span (T5: 3)")


class MixturePart(Section):
    """One source of a data mixture: the ingested documents it takes and its weight."""

    name: str = Field(
        pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", max_length=64, description="names the part: "
        "its folder in the dataset output and its metrics (loss/<name>, val_loss/<name>)")
    source: str = Field(
        min_length=1, description="which ingested documents belong to this part, matched "
        "against the file each came from (as ingest.sources[].path names it, relative to "
        "data_dir): that file, a folder holding it, or a glob (* ? [] within a folder, ** "
        "across folders); a document goes to the first part that matches it")
    weight: float = Field(
        gt=0, allow_inf_nan=False, description="share of the training batches drawn from this "
        "part, relative to the other parts' weights (normalized: 7 and 3 mean 70% and 30%)")


class DatasetConfig(Section):
    """Tokenize the ingested documents and pack them into examples for one objective."""

    objective: Literal["clm", "mlm", "span"] = Field(
        "clm", description="clm: causal language modelling; documents joined by the "
        "end-of-text token and cut into rows of seq_len tokens (labels are shifted inside "
        "the model); mlm: BERT sentence pairs [CLS] A [SEP] B [SEP] with masking (section "
        "mlm); span: T5 span corruption (section span)")
    seq_len: int = Field(
        128, ge=8, le=1_048_576, description="tokens per row (the model's context length); "
        "mlm: max_seq_len of a pair; span: encoder input length (512 gives targets of 114)")
    validation_fraction: float = Field(
        0.02, gt=0, lt=1, description="share of documents (not rows) held out for "
        "validation, chosen by a seeded hash of the document id")
    max_tokens: int | None = Field(
        None, ge=1, description="stop once the train split holds this many tokens (rounded up "
        "to whole rows, spread evenly over the ingest shards); unset = the whole corpus")
    mlm: MlmConfig = Field(default_factory=MlmConfig)
    span: SpanConfig = Field(default_factory=SpanConfig)
    mixture: list[MixturePart] = Field(
        default_factory=list, description="several sources, each with a weight: one dataset per "
        "part (its own train and validation splits; max_tokens applies to each), mixed by "
        "weight when pretraining, one source per global batch (README: Data mixing); empty: "
        "one dataset of every ingested document")

    @model_validator(mode="after")
    def _mixture_names_unique(self) -> "DatasetConfig":
        names = [part.name for part in self.mixture]
        if len(set(names)) != len(names):
            repeated = sorted({name for name in names if names.count(name) > 1})
            raise ValueError(f"mixture names {repeated} appear more than once; give each part "
                             f"its own name (it names its folder and its metrics)")
        if set(names) & {"train", "validation"}:
            raise ValueError("a mixture part cannot be named 'train' or 'validation' (the "
                             "names of the splits); rename it")
        return self

    @model_serializer(mode="wrap")
    def _leave_out_empty_mixture(self, handler):
        # The dump is the fingerprint's input: a dataset without a mixture keeps the
        # fingerprint (and cached output) it had before the key existed.
        dumped = handler(self)
        if not self.mixture:
            dumped.pop("mixture", None)
        return dumped

    @model_validator(mode="after")
    def _max_tokens_fills_a_row(self) -> "DatasetConfig":
        if self.max_tokens is not None and self.max_tokens < self.seq_len:
            raise ValueError(
                f"max_tokens={self.max_tokens} is less than one row of seq_len={self.seq_len} "
                f"tokens; raise max_tokens or unset it")
        return self
