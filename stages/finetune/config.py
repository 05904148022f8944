"""The `finetune` section: which tasks, how much data, and how to train each head.

Light on purpose (pydantic + the task registry, no torch): the engine imports it to
validate an experiment file before anything runs.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from stages.finetune.tasks.registry import get_task, task_names
from stages.section import Section


class FinetuneConfig(Section):
    tasks: list[str] = Field(
        default_factory=lambda: ["sst2"],
        description="tasks to fine-tune on, one run each (several at once when the cluster "
        f"allows): {', '.join(task_names())} (GLUE under <data_dir>/glue_data/, SQuAD under "
        "<data_dir>/squad/, CoNLL-2003 under <data_dir>/conll2003/); a T5 model fine-tunes every task "
        "as text to text (stages/finetune/text_to_text/: label words, STS-B scores like '3.8', SQuAD "
        "answers, CoNLL-2003 entity lists like 'EU [ORG] ; German [MISC]'), its source cut at max_seq_len")
    source: Literal["files", "hub"] = Field(
        "files",
        description="where the tasks' data comes from: files = the official files under data_dir; hub = "
        "the Hugging Face Hub through `datasets` (needs the network or a filled datasets cache): "
        "nyu-mll/glue, rajpurkar/squad, rajpurkar/squad_v2, eriktks/conll2003 (its parquet conversion)")
    init_from: str | None = Field(
        None,
        description="start from this Hugging Face BERT folder (config.json, model.safetensors, "
        "tokenizer.json; e.g. all-MiniLM-L6-v2) instead of the pretrain stage's model; null = "
        "the pipeline's own pretrained model")
    max_train_examples: int | None = Field(
        2000, ge=1,
        description="train on a seeded random subset of this many training examples; "
        "null = the whole training set. The dev set is always scored in full")
    max_eval_examples: int | None = Field(
        None, ge=1,
        description="score on a seeded subset of this many dev examples (SQuAD questions, "
        "CoNLL sentences, GLUE rows); null = the whole dev set")
    max_test_examples: int | None = Field(
        None, ge=1,
        description="GLUE: predict a seeded subset of this many test rows, for quick runs (like "
        "run_glue.py's max_predict_samples: the submission file then holds only those rows, "
        "which the GLUE server does not accept); null = the whole test split. CoNLL-2003's "
        "test file is sampled by max_eval_examples")
    doc_stride: int = Field(128, ge=1, description="SQuAD: context tokens between the starts of "
                            "consecutive windows over a long context")
    max_query_len: int = Field(64, ge=1, description="SQuAD: question tokens kept (the rest is cut)")
    max_answer_len: int = Field(30, ge=1, description="SQuAD: longest answer span in tokens when decoding")
    n_best_size: int = Field(20, ge=1, description="SQuAD: start and end candidates per window, and "
                             "answers kept per question in nbest_predictions.json")
    squad_eval_fraction: float = Field(
        0.2, gt=0, lt=1,
        description="SQuAD without a train file: the fraction of the dev file's articles held out "
        "for scoring (seeded); the other articles are trained on")
    epochs: int | None = Field(
        None, ge=1,
        description="passes over the (subset of the) training set; null = the task's default from "
        "the BERT paper (3; SQuAD v2.0: 2; table in stages/finetune/task_defaults.py)")
    lr: float | None = Field(
        None, gt=0,
        description="peak AdamW learning rate; null = the task's default from the BERT paper "
        "(GLUE 2e-5; SQuAD and CoNLL-2003 5e-5)")
    weight_decay: float = Field(0.01, ge=0, description="AdamW decoupled weight decay")
    adam_betas: tuple[float, float] = Field(
        (0.9, 0.999),
        description="AdamW (beta1, beta2); BERT's fine-tuning uses (0.9, 0.999), as transformers' Trainer")
    warmup_fraction: float = Field(
        0.1, ge=0, lt=1,
        description="fraction of the optimizer steps spent warming the learning rate up "
        "linearly from 0; it then decays linearly to 0 (0.1 is the BERT paper's, for every task)")
    micro_batch_size: int | None = Field(
        None, ge=1,
        description="examples per worker per forward/backward pass; null = the task's default from "
        "the BERT paper (a global batch of 32; SQuAD v2.0: 48) split over num_workers x "
        "gradient_accumulation_steps, rounded up")
    gradient_accumulation_steps: int = Field(
        1, ge=1,
        description="micro-batches per optimizer step; the global batch is "
        "micro_batch_size x gradient_accumulation_steps x num_workers")
    eval_batch_size: int = Field(64, ge=1, description="examples per worker per forward pass when predicting")
    max_seq_len: int = Field(
        64, ge=8,
        description="tokens per example after truncation and padding; at most the pretrained "
        "model's max_seq_len (pretrain's dataset.seq_len)")
    grad_clip: float = Field(1.0, ge=0, description="clip the global gradient norm to this; 0 = off")
    classifier_dropout: float | None = Field(
        None, ge=0, lt=1,
        description="dropout before the classification layer; null = the backbone's dropout")
    num_workers: int = Field(2, ge=1, description="Ray Train workers (data-parallel ranks) per task")
    max_parallel_tasks: int | None = Field(
        None, ge=1,
        description="tasks fine-tuned at the same time, each its own Ray Train run; null = as many as "
        "the cluster's CPUs (and GPUs) hold at num_workers (x gpus_per_worker) each, so 1 on a "
        "2-CPU machine with num_workers 2")
    gpus_per_worker: int = Field(
        0, ge=0, le=1,
        description="GPUs per Ray Train worker: 0 = train on CPUs (gloo); 1 = one GPU per worker "
        "(NCCL), so the cluster needs num_workers GPUs; more than one per worker is not supported")
    zero_stage: int = Field(
        0, ge=0, le=3,
        description="DeepSpeed ZeRO stage: 0 plain data parallel, 1 shards optimizer state, "
        "2 also gradients, 3 also weights")
    precision: Literal["fp32", "bf16"] = Field("fp32", description="training precision (bf16 via DeepSpeed)")
    save_model: bool = Field(
        True, description="write the fine-tuned weights to <task>/model/ (backbone in the "
        "pretrained format + head.safetensors + head_config.json + tokenizer.json)")
    seed: int | None = Field(
        None,
        description="seed for the training subset, head init and shuffling; null = the "
        "experiment's top-level seed")
    log_every: int = Field(
        10, ge=1, description="log train loss, gradient norm and lr (metrics.jsonl and the task's wandb run) every N "
        "optimizer steps")
    eval_every_epoch: bool = Field(
        True,
        description="score the dev set after every epoch and log dev_<metric> per epoch (metrics.jsonl "
        "and the task's wandb run); false = only after the last epoch")
    keep_best: bool = Field(
        False,
        description="keep the weights of the epoch with the best dev score on the task's main metric "
        "(the first of its metrics: accuracy, F1, ...) and predict dev and test and save the model "
        "with them; needs eval_every_epoch and zero_stage <= 2. false = the last epoch's weights")
    t5_scoring: Literal["generate", "rank"] = Field(
        "generate",
        description="how a T5 predicts GLUE classification tasks: generate = greedy decoding, read back as a "
        "label word (a generation that is no label word is unreadable: scored as wrong); rank = score each "
        "label word by the decoder's log-likelihood given the input and predict the best (never unreadable, "
        "meaningful for small or briefly trained T5s). STS-B, SQuAD and CoNLL-2003 always generate")
    max_unreadable_fraction: float = Field(
        0.1, ge=0, le=1,
        description="a T5 task whose share of dev generations that cannot be read back (no label word, not a "
        "number) exceeds this gets a warning in the stage output, in its metrics.json (`warnings`) and in the "
        "report's problems")
    max_failures: int = Field(
        1, ge=0,
        description="times Ray Train restarts a task's workers from the last checkpoint after a failure")

    @field_validator("tasks")
    @classmethod
    def _known_unique_tasks(cls, tasks: list[str]) -> list[str]:
        if not tasks:
            raise ValueError("list at least one task, e.g. tasks: [sst2]")
        for name in tasks:
            get_task(name)  # raises with the list of valid names
        duplicates = sorted({name for name in tasks if tasks.count(name) > 1})
        if duplicates:
            raise ValueError(f"tasks {duplicates} are listed twice; list each task once")
        return tasks

    @model_validator(mode="after")
    def _keep_best_is_possible(self) -> "FinetuneConfig":
        if self.keep_best and not self.eval_every_epoch:
            raise ValueError("keep_best picks the best of the per-epoch dev scores: set eval_every_epoch: "
                             "true, or keep_best: false")
        if self.keep_best and self.zero_stage == 3:
            raise ValueError("keep_best loads the best epoch's weights back into the model, which ZeRO-3 "
                             "shards: use zero_stage 0, 1 or 2 with keep_best, or keep_best: false")
        return self
