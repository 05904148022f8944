"""Config of the dataset stage: how documents become fixed-length training rows.

Only pydantic here: the engine loads this module at startup to validate the YAML.
"""

from typing import Literal

from pydantic import Field, model_validator

from stages.section import Section


class DatasetConfig(Section):
    """Tokenize the ingested documents and pack them into rows for one objective."""

    objective: Literal["clm"] = Field(
        "clm", description="clm: causal language modelling; documents joined by the "
        "end-of-text token and cut into rows of seq_len tokens (labels are shifted inside "
        "the model)")
    seq_len: int = Field(
        128, ge=8, le=1_048_576, description="tokens per row (the model's context length)")
    validation_fraction: float = Field(
        0.02, gt=0, lt=1, description="share of documents (not rows) held out for "
        "validation, chosen by a seeded hash of the document id")
    max_tokens: int | None = Field(
        None, ge=1, description="stop once the train split holds this many tokens (rounded up "
        "to whole rows, spread evenly over the ingest shards); unset = the whole corpus")

    @model_validator(mode="after")
    def _max_tokens_fills_a_row(self) -> "DatasetConfig":
        if self.max_tokens is not None and self.max_tokens < self.seq_len:
            raise ValueError(
                f"max_tokens={self.max_tokens} is less than one row of seq_len={self.seq_len} "
                f"tokens; raise max_tokens or unset it")
        return self
