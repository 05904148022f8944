"""A task's data made ready for training: token arrays per split, and how to score and
read back the model's outputs.

    family = family_for(get_task("sst2"), source.family)     # stages.finetune.families
    prepared = family.prepare(TaskRequest(spec, cfg, seed=0, source=source, data_dir=data_dir))
    prepared.encoded["train"]               # EncodedSplit: what the workers train on
    prepared.scorers["dev"](outputs)        # head outputs (N, k) -> {"accuracy": ...}
    prepared.predictors["dev"](outputs)     # head outputs -> class ids, answers, tags ...

Every task family prepares one (`stages.finetune.families`), and so do benchmarks that
train another implementation on exactly the same rows
(benchmarks/finetune_vs_transformers.py). The scorers are picklable (functools.partial
of module functions): rank 0 of the Ray Train run scores every epoch's dev predictions
with them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from stages.finetune.encode import EncodedSplit

Scorer = Callable[[np.ndarray], dict[str, float]]


@dataclass
class PreparedTask:
    """encoded:        split -> token arrays ("train", "dev", and "test" where predicted)
    scorers:           split -> scorer of head outputs (splits with gold labels)
    predictors:        split -> head outputs -> the family's predictions for the files
                       (GLUE: class ids or scores; SQuAD: decoded answers; CoNLL: tags
                       per sentence); `TaskFamily.predict` applies them
    predict_splits:    splits predicted after training
    data:              the family's own view of the rows, for writing prediction files
                       (GLUE: TaskExamples per split; CoNLL: sentences; SQuAD: questions
                       and windows)
    description:       one line saying what is trained and scored
    """

    encoded: dict[str, EncodedSplit]
    scorers: dict[str, Scorer]
    predictors: dict[str, Callable[[np.ndarray], Any]]
    predict_splits: tuple[str, ...]
    data: dict[str, Any]
    description: str
