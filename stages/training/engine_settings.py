"""What a DeepSpeed engine is built from: one frozen record that pretraining and
fine-tuning both fill from their own config sections.

    settings = EngineSettings.from_pretrain(pretrain_cfg)
    settings = EngineSettings.for_finetuning(finetune_cfg, total_steps)
    engine = create_engine(model, settings, user_deepspeed_config=None)    # engine.py

The settings hold exactly what the engine reads: the DeepSpeed config's inputs
(deepspeed_config.py's deepspeed_config_for, which imports this module), AdamW's
(build_param_groups, adamw_implementation) and the lr schedule's (`schedule()`). A section's other keys (data, logging, evaluation) never reach
the engine, so the two stages share one builder without sharing a config class.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from stages.training.schedule import WarmupDecaySchedule


@dataclass(frozen=True)
class LossScaling:
    """fp16's dynamic loss scaling (DeepSpeed's fp16 section): start at
    2**initial_scale_power, halve after `hysteresis` consecutive overflowing steps (the
    step is skipped), double after `loss_scale_window` steps without one, never go below
    min_loss_scale."""

    initial_scale_power: int = 16
    loss_scale_window: int = 1000
    hysteresis: int = 2
    min_loss_scale: float = 1.0


@dataclass(frozen=True, kw_only=True)
class EngineSettings:
    # Batch: DeepSpeed derives the global batch as micro_batch_size x
    # gradient_accumulation_steps x the number of workers.
    micro_batch_size: int  # sequences (examples) per worker per forward/backward pass
    gradient_accumulation_steps: int  # micro batches per optimizer step
    # DeepSpeed
    zero_stage: int  # 0 plain data parallel, 1 shard optimizer state, 2 also gradients, 3 also parameters
    grad_clip: float  # clip the global gradient norm to this (DeepSpeed's gradient_clipping); 0 = off
    precision: str  # "fp32", "bf16" or "fp16" (fp16 adds dynamic loss scaling: loss_scaling)
    # AdamW
    lr: float  # peak learning rate, reached at the end of warmup
    weight_decay: float  # decoupled weight decay of matrices and embeddings (not biases, norms)
    adam_betas: tuple[float, float]  # (beta1, beta2)
    # Learning-rate schedule (WarmupDecaySchedule), in optimizer steps
    warmup_steps: int  # linear warmup from ~0 to lr
    max_steps: int  # the decay ends here
    lr_decay: str  # "cosine", "linear", "constant" or "inverse_sqrt"
    min_lr_ratio: float  # final lr as a fraction of lr
    # With defaults: what only pretraining sets today
    optimizer_impl: str = "auto"  # torch AdamW implementation: auto, fused, foreach or for_loop
    offload_optimizer: bool = False  # ZeRO-Offload: optimizer state and fp32 master weights in CPU memory
    offload_param: bool = False  # ZeRO-3 only: also the parameters between uses
    loss_scaling: LossScaling = LossScaling()  # fp16's dynamic loss scaling

    def schedule(self) -> WarmupDecaySchedule:
        """The LambdaLR multiplier: warmup_steps of linear warmup, then lr_decay."""
        return WarmupDecaySchedule(warmup_steps=self.warmup_steps, max_steps=self.max_steps,
                                   decay=self.lr_decay, min_lr_ratio=self.min_lr_ratio)

    @classmethod
    def from_pretrain(cls, cfg: Any) -> EngineSettings:
        """From the pretrain section (stages/pretrain/config.py's PretrainConfig)."""
        scaling = cfg.loss_scaling
        return cls(
            micro_batch_size=cfg.micro_batch_size,
            gradient_accumulation_steps=cfg.gradient_accumulation_steps,
            zero_stage=cfg.zero_stage,
            grad_clip=cfg.gradient_clipping,
            precision=cfg.precision,
            lr=cfg.lr,
            weight_decay=cfg.weight_decay,
            adam_betas=tuple(cfg.adam_betas),
            warmup_steps=cfg.warmup_steps,
            max_steps=cfg.max_steps,
            lr_decay=cfg.lr_decay,
            min_lr_ratio=cfg.min_lr_ratio,
            optimizer_impl=cfg.optimizer_impl,
            offload_optimizer=cfg.offload_optimizer,
            offload_param=cfg.offload_param,
            loss_scaling=LossScaling(
                initial_scale_power=scaling.initial_scale_power, loss_scale_window=scaling.loss_scale_window,
                hysteresis=scaling.hysteresis, min_loss_scale=scaling.min_loss_scale),
        )

    @classmethod
    def for_finetuning(cls, cfg: Any, total_steps: int) -> EngineSettings:
        """From a fine-tuning section whose task defaults are resolved (lr and
        micro_batch_size set; stages/finetune's FinetuneConfig, or any object with its
        attributes), for a run of `total_steps` optimizer steps: warmup_fraction of them
        warm up, then the lr decays linearly to 0 (the BERT paper's schedule)."""
        for key in ("lr", "micro_batch_size"):
            if getattr(cfg, key) is None:
                raise ValueError(f"finetune.{key} is unset: resolve the task's defaults "
                                 "(stages/finetune/task_defaults.py) before building the engine")
        return cls(
            micro_batch_size=cfg.micro_batch_size,
            gradient_accumulation_steps=cfg.gradient_accumulation_steps,
            zero_stage=cfg.zero_stage,
            grad_clip=cfg.grad_clip,
            precision=cfg.precision,
            lr=cfg.lr,
            weight_decay=cfg.weight_decay,
            adam_betas=tuple(cfg.adam_betas),
            # finetune.warmup_steps and lr_decay (inverse_sqrt for a Transformer trained from scratch)
            # where set; else the BERT paper's fraction and linear decay.
            warmup_steps=(getattr(cfg, "warmup_steps", None) if getattr(cfg, "warmup_steps", None) is not None
                          else round(cfg.warmup_fraction * total_steps)),
            max_steps=total_steps,
            lr_decay=getattr(cfg, "lr_decay", "linear"),
            min_lr_ratio=0.0,
        )
