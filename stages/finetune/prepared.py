"""A task's data made ready for training: token arrays per split and how to score them.

    prepared = prepare_task(get_task("sst2"), cfg, source=source, data_dir=data_dir, seed=0)
    prepared.encoded["train"]               # EncodedSplit: what the workers train on
    prepared.scorers["dev"](outputs)        # head outputs (N, k) -> {"accuracy": ...}

The stage's task runners (`glue_task`, `squad.task`, `conll.task`)
build their inputs with it, and so do benchmarks that train another implementation on
exactly the same rows (benchmarks/finetune_vs_transformers.py). The scorers are
picklable (functools.partial of module functions): rank 0 of the Ray Train run scores
every epoch's dev predictions with them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from stages.finetune.encode import EncodedSplit

Scorer = Callable[[np.ndarray], dict[str, float]]


@dataclass
class PreparedTask:
    """encoded:        split -> token arrays ("train", "dev", and "test" where predicted)
    scorers:           split -> scorer of head outputs (splits with gold labels)
    predict_splits:    splits predicted after training
    data:              the family's own view of the rows, for writing prediction files
                       (GLUE: TaskExamples per split; CoNLL: sentences and first-subword
                       positions; SQuAD: questions and windows)
    description:       one line saying what is trained and scored
    """

    encoded: dict[str, EncodedSplit]
    scorers: dict[str, Scorer]
    predict_splits: tuple[str, ...]
    data: dict[str, Any]
    description: str


def prepare_task(spec, cfg, *, source: dict[str, Any], data_dir: Path, seed: int) -> PreparedTask:
    from stages.finetune.tasks import ConllSpec, SquadSpec

    if isinstance(spec, SquadSpec):
        from stages.finetune.squad.task import prepare_squad

        return prepare_squad(spec, cfg, source=source, data_dir=Path(data_dir), seed=seed)
    if isinstance(spec, ConllSpec):
        from stages.finetune.conll.task import prepare_conll

        return prepare_conll(spec, cfg, source=source, data_dir=Path(data_dir), seed=seed)
    from stages.finetune.glue_task import prepare_glue

    return prepare_glue(spec, cfg, source=source, data_dir=Path(data_dir), seed=seed)
