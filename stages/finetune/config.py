"""The `finetune` section: which tasks, how much data, and how to train each head.

Light on purpose (pydantic + the task registry, no torch): the engine imports it to
validate an experiment file before anything runs.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from stages.finetune.tasks import get_task, register_task_spec, task_names
from stages.section import Section


class DecodingConfig(Section):
    """How sequence-to-sequence tasks generate (`stages.finetune.seq2seq`)."""

    num_beams: int = Field(
        4, ge=1, description="1 = greedy; more = beam search keeping this many hypotheses (the Transformer "
        "paper's 4)")
    length_penalty: float = Field(
        0.6, description="beam search: a finished hypothesis scores sum(log p) / length**length_penalty "
        "(transformers' convention; the paper's alpha 0.6)")
    extra_length: int = Field(
        50, ge=1, description="generate at most the batch's longest source length + this many tokens (the "
        "paper's 'input length + 50')")


class FinetuneConfig(Section):
    task_specs: list[str] = Field(
        default_factory=list,
        description="sequence-to-sequence task spec YAMLs of your own (source and target files, prefix, lengths, "
        "metrics; keys in stages/finetune/seq2seq/spec.py), paths relative to the working directory; list each "
        "one's `name` in tasks")
    tasks: list[str] = Field(
        default_factory=lambda: ["sst2"],
        description="tasks to fine-tune on, one run each (several at once when the cluster "
        f"allows): {', '.join(task_names())} (GLUE under <data_dir>/glue_data/, SQuAD under "
        "<data_dir>/squad/, CoNLL-2003 under <data_dir>/conll2003/); a T5 model fine-tunes every task "
        "as text to text (each task's text_to_text.py under stages/finetune/: label words, STS-B scores "
        "like '3.8', SQuAD answers, CoNLL-2003 entity lists like 'EU [ORG] ; German [MISC]'), its source "
        "cut at max_seq_len. "
        "Sequence to sequence (T5, the original Transformer, GPT; not BERT): multi30k_en_de, multi30k_de_en "
        "(<data_dir>/mt/multi30k/), dialogsum (<data_dir>/summarization/dialogsum/) and the names of task_specs")
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
    init: Literal["pretrained", "random"] = Field(
        "pretrained",
        description="pretrained = start from the pretrain stage's weights (or init_from); random = the same "
        "architecture and tokenizer with freshly initialised weights (seeded): training from scratch, as the "
        "Transformer paper did")
    max_steps: int | None = Field(
        None, ge=1, description="train exactly this many optimizer steps, in as many epochs as they take (the "
        "last one cut short; epochs is then not used); null = epochs")
    lr_decay: Literal["linear", "inverse_sqrt", "cosine", "constant"] = Field(
        "linear", description="after warmup: linear decay to 0 (BERT's); inverse_sqrt (the Transformer "
        "paper's, stages/training/schedule.py); cosine; constant")
    warmup_steps: int | None = Field(
        None, ge=0, description="optimizer steps of linear warmup; null = warmup_fraction of the run's steps")
    label_smoothing: float = Field(
        0.0, ge=0, lt=1, description="sequence-to-sequence tasks: label smoothing of the target tokens' "
        "cross-entropy (the Transformer paper's 0.1)")
    dropout: float | None = Field(
        None, ge=0, lt=1, description="sequence-to-sequence tasks: the model's dropout while fine-tuning (the "
        "Transformer paper's 0.1); null = the pretrained model's")
    average_last: int | None = Field(
        None, ge=2, description="sequence-to-sequence tasks: predict and save with the average of the weights "
        "of the last N snapshots (the Transformer paper averages the last 5 checkpoints); null = the last "
        "weights. Needs zero_stage <= 2")
    average_every: int | None = Field(
        None, ge=1, description="average_last: a snapshot every N optimizer steps (and at the last); null = "
        "at the end of every epoch")
    decoding: DecodingConfig = Field(default_factory=DecodingConfig,
                                     description="sequence-to-sequence decoding")
    max_failures: int = Field(
        1, ge=0,
        description="times Ray Train restarts a task's workers from the last checkpoint after a failure")

    @field_validator("task_specs")
    @classmethod
    def _load_task_specs(cls, paths: list[str]) -> list[str]:
        names: dict[str, str] = {}
        for path in paths:  # before tasks (fields validate in order): their names become tasks
            name = register_task_spec(path).name
            if name in names:
                raise ValueError(f"{path} and {names[name]} both name their task {name!r}; give each its own name")
            names[name] = path
        return paths

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

    def check_model_family(self, family: str) -> None:
        """A model of `family` (pretrain.model.family) can fine-tune every task listed, or
        a ValueError names the ones it cannot (the experiment's validator calls this)."""
        if family != "bert" or self.init_from is not None:  # an init_from BERT is checked below
            return
        from stages.finetune.seq2seq.spec import BERT_REFUSAL, Seq2SeqSpec

        generative = [name for name in self.tasks if isinstance(get_task(name), Seq2SeqSpec)]
        if generative:
            raise ValueError(f"[finetune] tasks {', '.join(generative)}: pretrain.model.family is bert, and "
                             f"{BERT_REFUSAL}")

    @model_validator(mode="after")
    def _keep_best_is_possible(self) -> "FinetuneConfig":
        if self.keep_best and not self.eval_every_epoch:
            raise ValueError("keep_best picks the best of the per-epoch dev scores: set eval_every_epoch: "
                             "true, or keep_best: false")
        if self.keep_best and self.zero_stage == 3:
            raise ValueError("keep_best loads the best epoch's weights back into the model, which ZeRO-3 "
                             "shards: use zero_stage 0, 1 or 2 with keep_best, or keep_best: false")
        if self.average_last is not None and self.zero_stage == 3:
            raise ValueError("[average_last] loads the averaged weights back into the model, which ZeRO-3 shards: "
                             "use zero_stage 0, 1 or 2 with it, or average_last: null")
        if self.average_last is not None and self.keep_best:
            raise ValueError("[average_last] and keep_best both choose the final weights: set one of them")
        if self.lr_decay == "inverse_sqrt" and not self.warmup_steps:
            raise ValueError("[lr_decay] inverse_sqrt peaks at the end of warmup: set warmup_steps >= 1 (the "
                             "Transformer paper's 4000; a few hundred for a small run)")
        if self.init == "random" and self.init_from is not None:
            raise ValueError("[init] random starts from fresh weights, but init_from names weights to start from: "
                             "remove one of them")
        if self.init_from is not None:  # a Hugging Face BERT folder
            from stages.finetune.seq2seq.spec import BERT_REFUSAL, Seq2SeqSpec

            generative = [name for name in self.tasks if isinstance(get_task(name), Seq2SeqSpec)]
            if generative:
                raise ValueError(f"[tasks] {', '.join(generative)}: init_from is a BERT folder, and {BERT_REFUSAL}")
        return self
