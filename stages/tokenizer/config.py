from pydantic import Field

from stages.section import Section


class TokenizerConfig(Section):
    kind: str = Field("bpe", description="bpe (byte-level, GPT-2 style)")
    vocab_size: int = Field(8192, ge=256)
    min_frequency: int = Field(2, ge=1)
    sample_bytes: int = Field(50_000_000, ge=1, description="training text budget")
