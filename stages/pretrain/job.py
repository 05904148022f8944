"""What the pretrain driver hands every Ray Train worker: one frozen, checked record.

    job = PretrainJob(config=cfg, seed=0, dataset_dir=..., ...)   # run.py; checked here
    fit(train_loop_per_worker, job.as_loop_config(), ...)
    job = PretrainJob.from_loop_config(loop_config)               # train_loop.py, on each worker

The driver resolves everything that touches the user's files (the dataset's index.json,
the tokenizer, pretrain.init_from, pretrain.deepspeed_config, pretrain.eval_tasks) before
Ray starts, so a mistake fails there with the key's name rather than on every worker
after the cluster has started. The workers read the job's fields and never those paths:
a relative path need not exist from a worker's working directory.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stages.data.packed import INDEX_FILE
from stages.pretrain.config import PretrainConfig
from stages.tracking import MetricsLog

if TYPE_CHECKING:
    from stages.evaluate.evaluate_task import TaskPlan
    from stages.pretrain.sample_plan import SamplePlan
    from stages.training.model_source import ModelSource

# The model config's special token ids each family needs from the dataset (its index.json's
# pad_id and eos_id; run.model_token_ids): BERT pads, T5 also ends targets and starts decoding.
FAMILY_TOKEN_IDS = {
    "gpt": (),
    "bert": ("pad_token_id",),
    "t5": ("pad_token_id", "eos_token_id", "decoder_start_token_id"),
}
# Ray Train's train_loop_config must be a dict: the job travels under this one key.
LOOP_CONFIG_KEY = "job"


@dataclass(frozen=True, kw_only=True)
class PretrainJob:
    # The pretrain section as the driver loaded it (also the wandb run's config). Its
    # file-backed keys arrive resolved below: init_from as init_source, deepspeed_config
    # as user_deepspeed_config, eval_tasks as eval_plans.
    config: PretrainConfig
    seed: int  # the experiment's seed: initial weights, data order, per-rank dropout
    dataset_dir: Path  # the dataset stage's output (index.json + train/validation shards), absolute
    tokenizer_path: Path  # the tokenizer stage's tokenizer.json, copied next to exported weights; absolute
    output_dir: Path  # the stage's output directory (metrics, model/, snapshots/), absolute
    seq_len: int  # tokens per sequence, from the dataset's index.json: the model's max_seq_len
    vocab_size: int  # from the dataset's index.json (before pretrain.model.pad_vocab_to_multiple_of)
    token_ids: dict[str, int]  # pad_token_id / eos_token_id / decoder_start_token_id, as the family needs
    # Rank 0's sinks: this JSONL log, and wandb per the experiment's tracking section. Opened
    # inside the worker: a live wandb run cannot be pickled across to it.
    metrics_log: MetricsLog
    experiment: Any  # the whole experiment config (tracking.wandb, name) for the tracker
    fingerprint: str  # the stage's fingerprint: names and tags the wandb run
    # pretrain.init_from resolved by stages/pretrain/init_from.py (the checkpoint's folder,
    # files and architecture); None = random initialisation
    init_source: ModelSource | None = None
    user_deepspeed_config: dict[str, Any] | None = None  # pretrain.deepspeed_config's JSON, merged over ours
    # pretrain.eval_tasks planned by the driver (stages/pretrain/eval_tasks.py), one per
    # task, and the special token ids their scorer needs; empty = no in-loop tasks
    eval_plans: list[TaskPlan] = field(default_factory=list)
    eval_token_ids: dict[str, Any] = field(default_factory=dict)
    # pretrain.samples planned by the driver (stages/pretrain/sample_plan.py): the prompts'
    # token ids; None = no samples
    sample_plan: SamplePlan | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.config, PretrainConfig):
            raise TypeError(f"PretrainJob.config must be a PretrainConfig, got {type(self.config).__name__}")
        self._check_paths()
        for key in ("seq_len", "vocab_size"):
            value = getattr(self, key)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"PretrainJob.{key} must be a positive integer, got {value!r}; it comes "
                                 f"from {self.dataset_dir / INDEX_FILE}: rebuild the dataset stage")
        self._check_token_ids()
        self._check_resolved_keys()
        if not isinstance(self.metrics_log, MetricsLog):
            raise TypeError(f"PretrainJob.metrics_log must be a MetricsLog, got {type(self.metrics_log).__name__}")

    def as_loop_config(self) -> dict[str, PretrainJob]:
        """What fit() passes to Ray Train, whose train_loop_config must be a dict."""
        return {LOOP_CONFIG_KEY: self}

    @classmethod
    def from_loop_config(cls, loop_config: dict[str, Any]) -> PretrainJob:
        """The job inside a worker's train_loop_config (as_loop_config's inverse)."""
        job = loop_config[LOOP_CONFIG_KEY]
        assert isinstance(job, cls), f"train_loop_config[{LOOP_CONFIG_KEY!r}] is a {type(job).__name__}"
        return job

    def _check_paths(self) -> None:
        expected = {
            "dataset_dir": (self.dataset_dir / INDEX_FILE, "run the dataset stage first"),
            "tokenizer_path": (self.tokenizer_path, "the tokenizer stage's output is incomplete"),
            "output_dir": (self.output_dir, "the driver creates it before building the job"),
        }
        for key, (path, fix) in expected.items():
            given = getattr(self, key)
            if not isinstance(given, Path) or not given.is_absolute():
                # Workers may run in another working directory.
                raise ValueError(f"PretrainJob.{key} must be an absolute Path, got {given!r}")
            exists = path.is_dir() if key == "output_dir" else path.is_file()
            if not exists:
                raise FileNotFoundError(f"PretrainJob.{key}: {path} does not exist; {fix}")

    def _check_token_ids(self) -> None:
        family = self.config.model.family
        missing = [name for name in FAMILY_TOKEN_IDS[family] if name not in self.token_ids]
        if missing:
            raise ValueError(
                f"PretrainJob.token_ids lacks {', '.join(missing)}, which a {family} model needs; "
                f"{self.dataset_dir / INDEX_FILE} must record pad_id (and eos_id for t5): rebuild the "
                "dataset stage with a tokenizer that has these special tokens")
        for name, value in self.token_ids.items():
            if name not in FAMILY_TOKEN_IDS["t5"]:
                raise ValueError(f"PretrainJob.token_ids: unknown {name!r}; known: {FAMILY_TOKEN_IDS['t5']}")
            if not isinstance(value, int) or not 0 <= value < self.vocab_size:
                raise ValueError(f"PretrainJob.token_ids[{name!r}] = {value!r} is not a token id of the "
                                 f"dataset's vocabulary (0 to {self.vocab_size - 1})")

    def _check_resolved_keys(self) -> None:
        cfg = self.config
        if (self.init_source is not None) != bool(cfg.init_from):
            raise ValueError("PretrainJob.init_source must be resolved from pretrain.init_from exactly when "
                             f"it is set (init_from={cfg.init_from!r}; stages/pretrain/init_from.py)")
        if self.init_source is not None and self.init_source.family != cfg.model.family:
            raise ValueError(f"PretrainJob.init_source is a {self.init_source.family!r} checkpoint "
                             f"but pretrain.model.family is {cfg.model.family!r}")
        if self.user_deepspeed_config is not None and not isinstance(self.user_deepspeed_config, dict):
            raise ValueError("PretrainJob.user_deepspeed_config must be the JSON object of "
                             f"pretrain.deepspeed_config, got {type(self.user_deepspeed_config).__name__}")
        if self.user_deepspeed_config is not None and not cfg.deepspeed_config:
            raise ValueError("PretrainJob.user_deepspeed_config is set but pretrain.deepspeed_config is not")
        if len(self.eval_plans) != len(cfg.eval_tasks):
            raise ValueError(f"PretrainJob.eval_plans has {len(self.eval_plans)} plan(s) for "
                             f"{len(cfg.eval_tasks)} pretrain.eval_tasks; plan them with plan_eval_tasks")
        if (self.sample_plan is not None) != cfg.samples.enabled:
            raise ValueError("PretrainJob.sample_plan must be planned from pretrain.samples exactly when it has "
                             "prompts or num_dev_sources; plan it with plan_samples")
        if self.eval_plans and not self.eval_token_ids:
            raise ValueError("PretrainJob.eval_token_ids is empty but pretrain.eval_tasks are planned; "
                             "find them with scorer_token_ids")
