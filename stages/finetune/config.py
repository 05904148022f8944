from pydantic import Field

from stages.section import Section


class FinetuneConfig(Section):
    tasks: list[str] = Field(default_factory=lambda: ["sst2"])
    max_train_examples: int | None = Field(2000)
    epochs: int = Field(1, ge=1)
    lr: float = Field(5e-4, gt=0)
    micro_batch_size: int = Field(16, ge=1)
    max_seq_len: int = Field(64, ge=8)
