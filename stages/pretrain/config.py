"""Config of the pretrain stage: the model architecture (a nested section) and how to
train it. Vocabulary size and sequence length are not here: they come from the dataset's
index.json, so they can never disagree with the data."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from stages.section import Section


class ModelConfig(Section):
    family: Literal["gpt"] = Field(
        "gpt", description="model family; 'gpt' = GPT-2 decoder (pre-LN, learned positions, tied LM head)")
    num_layers: int = Field(2, ge=1, description="number of Transformer blocks")
    hidden_size: int = Field(128, ge=8, description="residual stream width (d_model)")
    num_heads: int = Field(4, ge=1, description="attention heads; must divide hidden_size")
    dropout: float = Field(0.0, ge=0, lt=1, description="dropout on embeddings, attention and MLP outputs")
    layer_norm_eps: float = Field(1e-5, gt=0, description="LayerNorm epsilon (GPT-2 uses 1e-5)")

    @model_validator(mode="after")
    def _heads_divide_hidden_size(self) -> "ModelConfig":
        if self.hidden_size % self.num_heads != 0:
            options = [h for h in range(1, self.hidden_size + 1) if self.hidden_size % h == 0][:8]
            raise ValueError(
                f"hidden_size={self.hidden_size} is not divisible by num_heads={self.num_heads}; "
                f"set num_heads to a divisor of hidden_size (e.g. one of {options}) "
                "or change hidden_size"
            )
        return self


class PretrainConfig(Section):
    model: ModelConfig = Field(default_factory=ModelConfig, description="model architecture")
    num_workers: int = Field(2, ge=1, description="Ray Train workers (one CPU or GPU each); data parallel")
    gpus_per_worker: int = Field(
        0, ge=0, le=1,
        description="GPUs per Ray Train worker: 0 = train on CPUs (gloo); 1 = one GPU per worker "
        "(NCCL), so the cluster needs num_workers GPUs; more than one per worker is not supported")
    zero_stage: int = Field(
        2, ge=0, le=3,
        description="DeepSpeed ZeRO stage: 0 plain data parallel, 1 shard optimizer state, "
        "2 also gradients, 3 also parameters")
    precision: Literal["fp32", "bf16"] = Field(
        "fp32", description="training precision; bf16 keeps fp32 master weights in the optimizer")
    micro_batch_size: int = Field(8, ge=1, description="sequences per worker per forward/backward pass")
    gradient_accumulation_steps: int = Field(
        1, ge=1, description="micro batches per optimizer step; global batch = "
        "micro_batch_size x gradient_accumulation_steps x num_workers")
    lr: float = Field(1e-3, gt=0, description="peak learning rate (AdamW), reached after warmup")
    min_lr_ratio: float = Field(0.1, ge=0, le=1, description="final learning rate as a fraction of lr")
    lr_decay: Literal["cosine", "linear", "constant"] = Field(
        "cosine", description="shape of the decay from lr to lr * min_lr_ratio after warmup")
    warmup_steps: int = Field(
        20, ge=0, description="optimizer steps of linear warmup from ~0 to lr (a warmup longer "
        "than max_steps is allowed: a short smoke run then never reaches the peak lr)")
    weight_decay: float = Field(
        0.1, ge=0, description="AdamW weight decay (not applied to biases and LayerNorms)")
    adam_betas: tuple[float, float] = Field((0.9, 0.95), description="AdamW (beta1, beta2)")
    gradient_clipping: float = Field(1.0, ge=0, description="clip the global gradient norm to this; 0 = off")
    max_steps: int = Field(200, ge=1, description="optimizer steps to train for (resumed runs end here too)")
    log_every: int = Field(
        1, ge=1, description="write a metrics.jsonl record every this many steps (loss averaged "
        "over them); each record costs one tiny all-reduce")
    eval_every: int = Field(50, ge=1, description="validation loss every this many steps, and at the end")
    eval_batches: int = Field(
        20, ge=1, description="validation micro batches per worker per evaluation (caps eval cost)")
    checkpoint_every: int = Field(
        50, ge=1, description="checkpoint (to resume from) every this many steps, and at the end")
    max_failures: int = Field(
        1, ge=0, description="restart the workers from the last checkpoint up to this many times "
        "when a worker or node dies")
