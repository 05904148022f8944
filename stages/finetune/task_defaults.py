"""Per-task default hyperparameters from the BERT paper, used where the config leaves a key unset.

    cfg = config_for_task(finetune_config, "squad")   # lr 5e-5, epochs 3, batch 32 unless set

Devlin et al. 2019 (arXiv:1810.04805):
  GLUE (Sec. 4.1): "a batch size of 32 and fine-tune for 3 epochs over the data for all
      GLUE tasks", learning rate picked per task on dev among 5e-5, 4e-5, 3e-5, 2e-5; the
      per-task picks are not published, so we take 2e-5, the rate of the official
      repository's GLUE recipe (google-research/bert README, MRPC: 2e-5, 3 epochs, batch 32).
  SQuAD v1.1 (Sec. 4.2): "3 epochs with a learning rate of 5e-5 and a batch size of 32".
  SQuAD v2.0 (Sec. 4.3): "2 epochs with a learning rate of 5e-5 and a batch size of 48".
  CoNLL-2003 (Sec. 5.3): no fine-tuning hyperparameters given; we use GLUE's batch and
      epochs with the top of the paper's rate grid (A.3: 5e-5, 3e-5, 2e-5), 5e-5.
  Warmup: 10% of the steps (the official run_classifier.py / run_squad.py
      warmup_proportion=0.1) for every task, so it stays a plain config value.

The paper's batch is the global batch: `micro_batch_size` unset becomes that batch split
over num_workers x gradient_accumulation_steps (rounded up, so never below the paper's).
Explicit config values always win; the task fingerprint sees the resolved values, so
writing the default explicitly gives the same fingerprint as leaving it unset.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from stages.finetune.config import FinetuneConfig
from stages.finetune.glue.tasks import GLUE_TASKS
from stages.finetune.seq2seq.spec import BUILTIN_SEQ2SEQ, Seq2SeqDefaults


@dataclass(frozen=True)
class TaskDefaults:
    lr: float
    epochs: int
    batch_size: int  # global examples per optimizer step


GLUE_DEFAULTS = TaskDefaults(lr=2e-5, epochs=3, batch_size=32)
TASK_DEFAULTS: dict[str, TaskDefaults] = {
    **{name: GLUE_DEFAULTS for name in GLUE_TASKS},
    "squad": TaskDefaults(lr=5e-5, epochs=3, batch_size=32),
    "squad_v2": TaskDefaults(lr=5e-5, epochs=2, batch_size=48),
    "conll2003": TaskDefaults(lr=5e-5, epochs=3, batch_size=32),
    # Translation and summarization: no paper gives AdamW fine-tuning rates (stages/finetune/seq2seq/spec.py).
    **{name: Seq2SeqDefaults() for name in BUILTIN_SEQ2SEQ},
}


def config_for_task(cfg: FinetuneConfig, task: str) -> FinetuneConfig:
    """`cfg` with its unset (None) lr, epochs and micro_batch_size filled from the task's
    paper defaults; set values are kept as they are."""
    # A user's translation or summarization spec (finetune.task_specs) takes the built-ins' defaults.
    defaults = TASK_DEFAULTS[task] if task in TASK_DEFAULTS else Seq2SeqDefaults()
    per_step = cfg.num_workers * cfg.gradient_accumulation_steps
    filled = {
        "lr": defaults.lr,
        "epochs": defaults.epochs,
        "micro_batch_size": max(1, math.ceil(defaults.batch_size / per_step)),
    }
    return cfg.model_copy(update={key: value for key, value in filled.items() if getattr(cfg, key) is None})
