"""GLUE classification and regression on a head (GPT: last real token; BERT: pooled [CLS]).

Writes into `<output_dir>/<task>/` (see `stages.finetune.outputs`): metrics.json (the
task's GLUE metrics on the dev set, each with its baseline and 95% interval, and run
facts), dev_predictions.tsv and the test predictions in GLUE submission format (e.g.
SST-2.tsv). The same writing serves a T5 (`families.text_to_text`): one that generates
also reports how many dev generations could not be read back (`unreadable_predictions`,
`unreadable_fraction`), with a warning past finetune.max_unreadable_fraction.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any, Callable

import numpy as np

from stages.finetune.encode import encode_texts, load_task_tokenizer
from stages.finetune.glue.examples import TaskExamples
from stages.finetune.glue.metrics import compute_metrics
from stages.finetune.glue.outputs import (
    DEV_PREDICTIONS_NAME, predictions_from_outputs, write_dev_predictions, write_submission,
)
from stages.finetune.glue.reader import read_split
from stages.finetune.glue.spec import TaskSpec
from stages.finetune.glue.text_to_text import unreadable_facts
from stages.finetune.prepared import PreparedTask
from stages.finetune.score_context import as_metrics, describe, glue_contexts, read_contexts
from stages.finetune.task_family import TaskFamily, TaskRequest


class GlueFamily(TaskFamily):
    name = "glue"
    spec_types = (TaskSpec,)

    def prepare(self, request: TaskRequest) -> PreparedTask:
        spec = request.spec
        tokenizer = load_task_tokenizer(request.source.tokenizer, request.cfg.max_seq_len)
        return glue_prepared(request, read_glue_splits(request), encode=partial(encode_texts, tokenizer),
                             score=partial(glue_scores, spec),
                             predictions=partial(predictions_from_outputs, spec))

    def write_outputs(self, request: TaskRequest, prepared: PreparedTask, outputs: dict[str, np.ndarray],
                      task_dir: Path) -> dict[str, Any]:
        spec, cfg = request.spec, request.cfg
        splits, generations = prepared.data["splits"], prepared.data["generations"]
        scores = prepared.scorers["dev"](outputs["dev"])
        predictions = self.predict(prepared, outputs)
        dev_predictions, test_predictions = predictions["dev"], predictions["test"]
        write_dev_predictions(task_dir / DEV_PREDICTIONS_NAME, spec, splits["dev"], dev_predictions,
                              generations=None if generations is None else generations(outputs["dev"]))
        write_submission(task_dir, spec, splits["test"], test_predictions)
        contexts = glue_contexts(spec.metrics, prepared.data["scored"](outputs["dev"]), splits["dev"].labels,
                                 seed=request.seed)
        unreadable = {} if generations is None else unreadable_facts(spec, cfg, dev_predictions, test_predictions)
        return {**scores, **as_metrics(contexts), **unreadable,
                "train_examples": len(splits["train"]), "dev_examples": len(splits["dev"]),
                "test_examples": len(splits["test"])}

    def summary(self, spec, metrics: dict[str, Any]) -> str:
        primary = spec.metrics[0]
        return f"dev {primary}={describe(metrics[primary], read_contexts(metrics).get(primary))}"


def read_glue_splits(request: TaskRequest) -> dict[str, TaskExamples]:
    """Seeded train/dev/test subsets (finetune.max_train_examples, max_eval_examples,
    max_test_examples; the whole test split by default), from the files under data_dir
    or from the Hub."""
    spec, cfg, seed = request.spec, request.cfg, request.seed
    if cfg.source == "hub":
        from stages.finetune.glue.hub import read_glue_split

        read = partial(read_glue_split, spec)
    else:
        read = partial(read_split, spec, Path(request.data_dir))
    return {
        "train": read("train").sample(cfg.max_train_examples, seed),
        "dev": read("dev").sample(cfg.max_eval_examples, seed),
        "test": read("test").sample(cfg.max_test_examples, seed),
    }


def glue_prepared(request: TaskRequest, splits: dict[str, TaskExamples], *, encode: Callable,
                  score: Callable, predictions: Callable, scored: Callable | None = None,
                  generations: Callable | None = None, how: str = "") -> PreparedTask:
    """A GLUE task's PreparedTask, for a head or a T5. encode(texts, labels) -> EncodedSplit;
    score(labels, outputs) -> metrics; predictions(outputs) -> class ids or scores for the
    files (-1 / NaN: unreadable); scored(outputs) -> what the metrics are computed on
    (default: the predictions); generations(outputs) -> a generating T5's texts, else None.
    data: {"splits": TaskExamples per split, "scored", "generations"}."""
    return PreparedTask(
        encoded={split: encode(ex.texts, ex.labels) for split, ex in splits.items()},
        scorers={"dev": partial(score, splits["dev"].labels)},
        predictors={"dev": predictions, "test": predictions},
        predict_splits=("dev", "test"),
        data={"splits": splits, "scored": scored or predictions, "generations": generations},
        description=f"{len(splits['train'])} train, {len(splits['dev'])} dev, {len(splits['test'])} test "
                    f"examples{how}; training on {request.cfg.num_workers} workers")


def glue_scores(spec: TaskSpec, labels: np.ndarray, outputs: np.ndarray) -> dict[str, float]:
    """Head outputs (N, num_labels) -> the task's GLUE metrics. Rank 0 scores each
    epoch's dev predictions with it, the driver the final ones."""
    return compute_metrics(spec.metrics, predictions_from_outputs(spec, outputs), labels)
