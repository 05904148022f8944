from pydantic import Field

from stages.section import Section


class ModelConfig(Section):
    family: str = Field("gpt", description="gpt")
    num_layers: int = Field(2, ge=1)
    hidden_size: int = Field(128, ge=8)
    num_heads: int = Field(4, ge=1)
    dropout: float = Field(0.0, ge=0, lt=1)


class PretrainConfig(Section):
    model: ModelConfig = Field(default_factory=ModelConfig)
    num_workers: int = Field(2, ge=1)
    zero_stage: int = Field(2, ge=0, le=3)
    micro_batch_size: int = Field(8, ge=1)
    lr: float = Field(1e-3, gt=0)
    warmup_steps: int = Field(20, ge=0)
    max_steps: int = Field(200, ge=1)
    checkpoint_every: int = Field(50, ge=1)
    eval_every: int = Field(50, ge=1)
