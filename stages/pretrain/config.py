"""Config of the pretrain stage: the model architecture (a nested section,
stages/pretrain/model_config.py) and how to train it. Vocabulary size and sequence
length are not here: they come from the dataset's index.json, so they can never disagree
with the data."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator, model_serializer, model_validator

from stages.evaluate.spec import builtin_task_names, check_task_list, resolve_task_spec
from stages.pretrain.model_config import ModelConfig
from stages.pretrain.model_families import GptModelConfig
from stages.section import Section


class LossScalingConfig(Section):
    initial_scale_power: int = Field(
        16, ge=0, le=32, description="fp16: the loss scale starts at 2**initial_scale_power")
    loss_scale_window: int = Field(
        1000, ge=1, description="fp16: double the loss scale after this many steps without overflow")
    hysteresis: int = Field(
        2, ge=1, description="fp16: overflowing steps (skipped) in a row before the scale is halved")
    min_loss_scale: float = Field(1.0, gt=0, description="fp16: the loss scale never drops below this")


class SamplesConfig(Section):
    prompts: list[str] = Field(
        default_factory=list, description="texts the live model continues during pretraining "
        "(samples.jsonl, the report, the dashboard, wandb's samples table): gpt continues each "
        "(\"\" starts a document); bert fills in each [MASK] (its mask token; every prompt needs "
        "one) with its most likely token and lists the 5 likeliest; t5 decodes each as a source "
        "(sentinels such as <extra_id_0> mark the spans to fill). Empty (and num_dev_sources 0) "
        "= no samples, and the section is left out of the stage's fingerprint; set, it is part "
        "of it (samples are an output)")
    num_dev_sources: int = Field(
        0, ge=0, le=64, description="t5 only: also decode the first this many sources of the "
        "validation split (span-corrupted text), shown beside their reference targets")
    every: int | None = Field(
        None, ge=1, description="sample every this many steps; also at each snapshot "
        "(snapshot_every) and at the last step; unset = every eval_every steps")
    seed: int = Field(
        1234, description="seed of the sampling generator (its own: training's random state is "
        "never touched), made afresh for each prompt at each step: two steps differ by the model "
        "only, and `pretrain generate --seed` with the same settings writes the last sample again")
    max_new_tokens: int = Field(
        32, ge=1, description="gpt, t5: tokens generated per prompt (a gpt prompt plus these must "
        "fit in dataset.seq_len: checked before training); sampling runs them all, even past "
        "the end of text, so that ranks sharing ZeRO-3 parameters stay in step, and the text "
        "is cut there")
    temperature: float = Field(
        0.8, ge=0, description="gpt, t5: softmax temperature; 0 = greedy (top_k and top_p unused)")
    top_k: int | None = Field(
        50, ge=1, description="gpt, t5: sample among the k likeliest tokens only; null = all")
    top_p: float = Field(
        1.0, gt=0, le=1, description="gpt, t5: nucleus sampling, among the fewest tokens whose "
        "probability reaches top_p; 1.0 = off")

    @property
    def enabled(self) -> bool:
        return bool(self.prompts) or self.num_dev_sources > 0

    def sampling(self) -> dict[str, Any]:
        """Keyword arguments of stages.models.generation's decoders (no generator)."""
        if self.temperature == 0:
            return {"do_sample": False}
        return {"do_sample": True, "temperature": self.temperature, "top_k": self.top_k,
                "top_p": self.top_p if self.top_p < 1.0 else None}

    def settings(self, family: str) -> dict[str, Any]:
        """What a samples.jsonl line records of how it was drawn."""
        if family == "bert":
            return {"candidates": BERT_SAMPLE_CANDIDATES}
        return {"max_new_tokens": self.max_new_tokens, "temperature": self.temperature,
                "top_k": self.top_k, "top_p": self.top_p, "seed": self.seed}


# The likeliest tokens a bert sample lists at each [MASK] (as transformers' fill-mask pipeline)
BERT_SAMPLE_CANDIDATES = 5


class PretrainConfig(Section):
    model: ModelConfig = Field(default_factory=GptModelConfig, description="model architecture")
    init_from: str | None = Field(
        None, description="continued pretraining: start from this checkpoint folder, a Hugging Face "
        "one (config.json + model.safetensors or pytorch_model.bin: GPT-2, BERT, T5) or a pretrain "
        "stage's model/; the architecture comes from it (pretrain.model keys you set must agree; "
        "dropout may differ), a BERT without MLM/NSP heads gets fresh ones, and the dataset's "
        "vocabulary must be the checkpoint's (tokenizer.from). A checkpoint of the run itself "
        "still wins on resume; null = random initialisation")
    num_workers: int = Field(2, ge=1, description="Ray Train workers (one CPU or GPU each); data parallel")
    gpus_per_worker: int = Field(
        0, ge=0, le=1,
        description="GPUs per Ray Train worker: 0 = train on CPUs (gloo); 1 = one GPU per worker "
        "(NCCL), so the cluster needs num_workers GPUs; more than one per worker is not supported")
    zero_stage: int = Field(
        2, ge=0, le=3,
        description="DeepSpeed ZeRO stage: 0 plain data parallel, 1 shard optimizer state, "
        "2 also gradients, 3 also parameters")
    precision: Literal["fp32", "bf16", "fp16"] = Field(
        "fp32", description="training precision; bf16 and fp16 keep fp32 master weights in the "
        "optimizer; fp16 adds dynamic loss scaling (pretrain.loss_scaling) and needs GPUs "
        "(DeepSpeed's CPU accelerator has no fp16)")
    loss_scaling: LossScalingConfig = Field(
        default_factory=LossScalingConfig, description="fp16 dynamic loss scaling")
    offload_optimizer: bool = Field(
        False, description="ZeRO-Offload: keep optimizer state and fp32 master weights in CPU "
        "memory and step them there (torch AdamW); needs zero_stage >= 1")
    offload_param: bool = Field(
        False, description="also keep the parameters in CPU memory between uses; needs "
        "zero_stage 3")
    activation_checkpointing: Literal["none", "full", "every_n"] = Field(
        "none", description="recompute transformer blocks' activations in the backward pass "
        "instead of keeping them from the forward pass (less memory, about one more forward "
        "pass of those blocks): full = every block, every_n = every "
        "activation_checkpointing_every-th block; applied from outside the model "
        "(stages/training/parallelize.py), so weights and checkpoints are unchanged")
    activation_checkpointing_every: int = Field(
        2, ge=1, description="every_n: checkpoint the n-th, 2n-th, ... block, counted over the "
        "whole model (t5: encoder blocks, then decoder blocks)")
    compile: bool = Field(
        False, description="torch.compile each transformer block in place (identical blocks "
        "share one graph; names and checkpoints unchanged) and the objective's loss (the fp32 "
        "cross-entropy over the vocabulary, fused instead of materialised); the first steps are "
        "slower while it compiles")
    compile_backend: Literal["inductor", "aot_eager", "eager"] = Field(
        "inductor", description="compile: torch.compile backend; inductor generates fused "
        "kernels (Triton on GPUs; on CPUs C++ built with the system compiler, g++ or clang, "
        "slow to build on few cores); aot_eager captures the forward and backward graphs "
        "without generating code, eager only the forward (both check that compilation works, "
        "no speed-up)")
    compile_options: dict[str, bool | int | float | str] = Field(
        default_factory=dict, description="compile with the inductor backend: options for "
        "torch.compile(options=...), checked against torch._inductor.list_options(); e.g. "
        "{coordinate_descent_tuning: true} tunes each generated kernel's launch settings "
        "(gpt2-small on an H200: 45.3% vs 44.6% MFU, about 100 s more compilation)")
    optimizer_impl: Literal["auto", "fused", "foreach", "for_loop"] = Field(
        "auto", description="torch AdamW implementation: auto = fused where torch has a fused "
        "kernel for the optimizer's device (CUDA; CPU since torch 2.4), else foreach; the same "
        "update up to float rounding")
    deepspeed_config: str | None = Field(
        None, description="path to a DeepSpeed JSON file deep-merged over the generated config "
        "(the file wins; every value of ours it changes is logged and listed in the stage "
        "metrics as deepspeed_overrides); relative to the directory the pipeline runs in")
    micro_batch_size: int = Field(8, ge=1, description="sequences per worker per forward/backward pass")
    gradient_accumulation_steps: int = Field(
        1, ge=1, description="micro batches per optimizer step; global batch = "
        "micro_batch_size x gradient_accumulation_steps x num_workers")
    lr: float = Field(1e-3, gt=0, description="peak learning rate (AdamW), reached after warmup")
    min_lr_ratio: float = Field(0.1, ge=0, le=1, description="final learning rate as a fraction of lr")
    lr_decay: Literal["cosine", "linear", "constant", "inverse_sqrt"] = Field(
        "cosine", description="shape of the decay from lr to lr * min_lr_ratio after warmup; "
        "inverse_sqrt = lr * sqrt(warmup_steps / step) (the Transformer paper's schedule; "
        "needs warmup_steps >= 1, ignores min_lr_ratio and max_steps)")
    warmup_steps: int = Field(
        20, ge=0, description="optimizer steps of linear warmup from ~0 to lr (a warmup longer "
        "than max_steps is allowed: a short smoke run then never reaches the peak lr)")
    weight_decay: float = Field(
        0.1, ge=0, description="AdamW weight decay (not applied to biases and LayerNorms)")
    adam_betas: tuple[float, float] = Field((0.9, 0.95), description="AdamW (beta1, beta2)")
    gradient_clipping: float = Field(1.0, ge=0, description="clip the global gradient norm to this; 0 = off")
    max_steps: int = Field(200, ge=1, description="optimizer steps to train for (resumed runs end here too)")
    label_smoothing: float = Field(
        0.0, ge=0, lt=1, description="label smoothing of every training cross-entropy (LM "
        "tokens and NSP/SOP); validation losses and perplexity are always without it")
    peak_tflops: float | None = Field(
        None, gt=0, description="peak dense TFLOP/s of one worker's device, the denominator of "
        "MFU (model FLOPs utilisation); unset = the GPU's known dense bf16 peak "
        "(stages/pretrain/peak_flops.py: A100 312, H100 SXM and H200 989, L4 121, ...), and no MFU on a "
        "CPU or an unknown GPU; an MFU above 100% warns that this is too low")
    log_every: int = Field(
        1, ge=1, description="write a metrics.jsonl record every this many steps (loss averaged "
        "over them); each record costs one tiny all-reduce")
    eval_every: int = Field(
        50, ge=1, description="validation loss (and the eval_tasks scores) every this many steps, "
        "and at the end")
    eval_batches: int = Field(
        20, ge=1, description="validation micro batches per worker per evaluation (caps eval cost)")
    eval_tasks: list[str] = Field(
        default_factory=list,
        description="zero/few-shot evaluation tasks scored on the live model at every eval_every "
        "(and at the end) and logged as `eval/<task>/<metric>`: built-in names of the evaluate "
        "stage (" + ", ".join(builtin_task_names()) + ") or task spec YAML paths; empty = none")
    eval_tasks_max_examples: int = Field(
        64, ge=1, description="examples scored per eval_tasks task at each evaluation (a subset "
        "drawn once with the evaluate stage's default seed, 1234; the same rows every time)")
    eval_tasks_shots: int = Field(
        0, ge=0, description="demonstrations in each eval_tasks prompt (perplexity tasks take none)")
    snapshot_every: int | None = Field(
        None, ge=1, description="every this many steps, write the full weights as "
        "`snapshots/step-<NNNNNNN>/` (what model/ holds) and list them with their step and "
        "training tokens in `snapshots/index.json`, for scoring the model across training; "
        "null = no snapshots")
    samples: SamplesConfig = Field(
        default_factory=SamplesConfig, description="text generated by the live model during "
        "training (stages/pretrain/samples.py), to watch it improve")
    checkpoint_every: int = Field(
        50, ge=1, description="checkpoint (to resume from) every this many steps, and at the end")
    checkpoint_async: bool = Field(
        False, description="training waits for a checkpoint only while its state is copied to "
        "host memory; the files are written and uploaded to Ray Train's storage in the background "
        "(Ray Train's async upload), at most one checkpoint at a time, and a failed one fails the run. "
        "A run resumes from the last checkpoint that every worker finished. Costs one copy of the "
        "checkpointed state in memory (docs/training.md, \"Checkpoints that do not stop training\")")
    max_failures: int = Field(
        1, ge=0, description="restart the workers from the last checkpoint up to this many times "
        "when a worker or node dies")

    @field_validator("init_from")
    @classmethod
    def _init_from_exists(cls, path: str | None) -> str | None:
        # Checked at load (plan / run exit 2 naming the key); the workers get the folder
        # resolved by the driver (stages/pretrain/init_from.py), not this path.
        if path is not None and not Path(path).expanduser().is_dir():
            raise ValueError(
                f"{path} is not a directory (a relative path is taken from the directory the "
                f"pipeline runs in, {Path.cwd()}); point it at a Hugging Face model folder or a "
                "pretrain stage's model/, or unset pretrain.init_from")
        return path

    @field_validator("deepspeed_config")
    @classmethod
    def _deepspeed_config_exists(cls, path: str | None) -> str | None:
        # Checked when the config is loaded (`pretrain plan` / `run` exit 2 naming the key),
        # not when the stage starts. Resolved as the stage reads it (read_deepspeed_json):
        # relative to the working directory. Training workers never re-check it: they get
        # the file's contents from the driver (train_loop.py), and their working directory
        # may be another one.
        if path is not None and not Path(path).is_file():
            raise ValueError(
                f"{path} does not exist (a relative path is taken from the directory the "
                f"pipeline runs in, {Path.cwd()}); fix the path or unset pretrain.deepspeed_config")
        return path

    @field_validator("eval_tasks")
    @classmethod
    def _eval_tasks_resolve(cls, tasks: list[str]) -> list[str]:
        # A misspelled task is a config error now, not a failure after the first
        # eval_every steps of training.
        return check_task_list(tasks)

    @model_validator(mode="after")
    def _samples_fit_the_family(self) -> "PretrainConfig":
        if self.samples.num_dev_sources and self.model.family != "t5":
            raise ValueError(
                "pretrain.samples.num_dev_sources applies to family t5 only (it decodes validation "
                f"sources); a {self.model.family} model samples from pretrain.samples.prompts: remove it")
        return self

    @model_serializer(mode="wrap")
    def _leave_out_samples_when_off(self, handler):
        # The dump is the fingerprint's input: a run without samples keeps the fingerprint
        # (and cached pretraining) it had before pretrain.samples existed.
        dumped = handler(self)
        if not self.samples.enabled:
            dumped.pop("samples", None)
        if dumped.get("peak_tflops") is None:  # unset: the device's own peak, or no MFU
            dumped.pop("peak_tflops", None)
        if not dumped.get("checkpoint_async"):  # off: the fingerprint from before the key existed
            dumped.pop("checkpoint_async", None)
        return dumped

    @model_validator(mode="after")
    def _eval_tasks_fit_the_family(self) -> "PretrainConfig":
        if self.model.family == "bert":
            generation = [task for task in self.eval_tasks if resolve_task_spec(task).kind == "generation"]
            if generation:
                raise ValueError(
                    f"pretrain.eval_tasks: {', '.join(generation)} generate text, which a BERT model "
                    "cannot do; remove them (they run for gpt and t5)")
            if self.model.variant == "electra" and self.eval_tasks:
                raise ValueError(
                    "pretrain.eval_tasks: BERT models are scored through their masked-LM head, which "
                    "ELECTRA's discriminator does not have; remove them for variant electra (fine-tune "
                    "the discriminator instead)")
        return self

    @model_validator(mode="after")
    def _precision_offload_and_schedule_fit_together(self) -> "PretrainConfig":
        if self.precision == "fp16" and self.gpus_per_worker == 0:
            raise ValueError(
                "precision fp16 needs GPUs: DeepSpeed's CPU accelerator cannot train in fp16. "
                "Use precision bf16 (or fp32) on CPUs, or set gpus_per_worker: 1")
        if self.offload_optimizer and self.zero_stage == 0:
            raise ValueError("offload_optimizer needs zero_stage 1, 2 or 3 (it moves the ZeRO-"
                             "sharded optimizer state); set zero_stage or offload_optimizer: false")
        if self.offload_param and self.zero_stage != 3:
            raise ValueError(f"offload_param needs zero_stage 3 (only ZeRO-3 shards parameters), "
                             f"zero_stage is {self.zero_stage}; set zero_stage: 3 or offload_param: false")
        defaults = type(self).model_fields
        if (self.activation_checkpointing != "every_n" and "activation_checkpointing_every" in self.model_fields_set
                and self.activation_checkpointing_every != defaults["activation_checkpointing_every"].default):
            raise ValueError("activation_checkpointing_every applies to activation_checkpointing: "
                             f"every_n only, not {self.activation_checkpointing!r}; set "
                             "activation_checkpointing: every_n or remove activation_checkpointing_every")
        if (not self.compile and "compile_backend" in self.model_fields_set
                and self.compile_backend != defaults["compile_backend"].default):
            raise ValueError("compile_backend applies only with compile: true; set compile: true "
                             "or remove compile_backend")
        if self.compile_options:
            check_compile_options(self.compile_options, self.compile, self.compile_backend)
        if self.lr_decay == "inverse_sqrt" and self.warmup_steps == 0:
            raise ValueError("lr_decay inverse_sqrt needs warmup_steps >= 1 (the lr peaks at the "
                             "end of warmup and decays as sqrt(warmup_steps / step) after it)")
        return self


def check_compile_options(options: dict[str, Any], compile: bool, backend: str) -> None:
    """pretrain.compile_options only where they take effect, with names inductor knows
    (torch would only refuse them inside a worker, at the first compiled step)."""
    if not compile or backend != "inductor":
        raise ValueError("compile_options apply only with compile: true and compile_backend: inductor; "
                         "set those or remove compile_options")
    import difflib

    from torch._inductor import list_options  # torch only when the key is used: plan stays light

    known = set(list_options())
    for name in options:
        if name not in known:
            close = difflib.get_close_matches(name, known, n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise ValueError(f"compile_options: {name!r} is not an inductor option; {hint}"
                             "see torch._inductor.list_options()")
