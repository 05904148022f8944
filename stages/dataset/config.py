from pydantic import Field

from stages.section import Section


class DatasetConfig(Section):
    objective: str = Field("clm", description="clm")
    seq_len: int = Field(128, ge=8)
    validation_fraction: float = Field(0.02, gt=0, lt=1)
    max_tokens: int | None = Field(None, description="stop after this many train tokens")
