"""One GLUE task in the finetune stage: read the TSVs, train on the workers, score, write files.

Writes into `<output_dir>/<task>/` (see `stages.finetune.outputs`): metrics.json (the
task's GLUE metrics on the dev set, each with its baseline and 95% interval, and run
facts), dev_predictions.tsv and the test predictions in GLUE submission format (e.g.
SST-2.tsv). A T5 that generates also reports how many dev generations could not be
read back (`unreadable_predictions`, `unreadable_fraction`), with a warning past
finetune.max_unreadable_fraction.
"""

from __future__ import annotations

import time
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from stages.finetune.best_checkpoint import best_epoch_facts
from stages.finetune.config import FinetuneConfig
from stages.finetune.encode import encode_texts, load_task_tokenizer
from stages.finetune.metrics import compute_metrics
from stages.finetune.outputs import (
    DEV_PREDICTIONS_NAME, UNREADABLE, predictions_from_outputs, unreadable_rows, write_dev_predictions,
    write_submission, write_task_metrics,
)
from stages.finetune.prepared import PreparedTask
from stages.finetune.score_context import as_metrics, describe, glue_contexts, read_contexts
from stages.finetune.tasks import TaskSpec
from stages.finetune.tasks.tsv import read_split
from stages.finetune.text_to_text.glue import label_words
from stages.finetune.worker import OUTPUTS_NAME


def finetune_glue(spec: TaskSpec, cfg: FinetuneConfig, *, seed: int, source: dict[str, Any],
                  data_dir: Path, task_dir: Path, storage_path: Path, metrics_log,
                  tracking: dict[str, Any] | None = None) -> dict[str, Any]:
    """Train, predict and write one GLUE task's outputs; returns what metrics.json holds."""
    from stages.finetune.run import train_prepared_task

    started = time.perf_counter()
    prepared = prepare_glue(spec, cfg, source=source, data_dir=data_dir, seed=seed)
    splits, to_predictions = prepared.data["splits"], prepared.data["predictions"]
    print(f"[finetune] {spec.name}: {prepared.description}; training on {cfg.num_workers} workers", flush=True)

    result = train_prepared_task(spec, cfg, seed=seed, source=source, prepared=prepared, task_dir=task_dir,
                                 storage_path=storage_path, metrics_log=metrics_log, tracking=tracking)

    with np.load(task_dir / OUTPUTS_NAME) as outputs:
        dev_outputs, test_outputs = outputs["dev"], outputs["test"]
    scores = prepared.scorers["dev"](dev_outputs)
    dev_predictions, test_predictions = to_predictions(dev_outputs), to_predictions(test_outputs)
    generations = prepared.data["generations"]
    write_dev_predictions(task_dir / DEV_PREDICTIONS_NAME, spec, splits["dev"], dev_predictions,
                          generations=None if generations is None else generations(dev_outputs))
    write_submission(task_dir, spec, splits["test"], test_predictions)
    contexts = glue_contexts(spec.metrics, prepared.data["scored"](dev_outputs), splits["dev"].labels, seed=seed)
    unreadable = {} if generations is None else unreadable_facts(spec, cfg, dev_predictions, test_predictions)

    metrics = {
        **scores, **as_metrics(contexts), **unreadable,
        "train_examples": len(splits["train"]), "dev_examples": len(splits["dev"]),
        "test_examples": len(splits["test"]), "epochs": cfg.epochs,
        **best_epoch_facts(task_dir, cfg.keep_best),
        "steps": int(result.metrics.get("step", 0)) if result.metrics else 0,
        "seconds": round(time.perf_counter() - started, 2),
    }
    write_task_metrics(task_dir, {"task": spec.name, "primary_metric": spec.metrics[0], **metrics})
    primary = spec.metrics[0]
    print(f"[finetune] {spec.name}: dev {primary}="
          f"{describe(scores[primary], read_contexts(metrics).get(primary))} in {metrics['seconds']:.1f}s", flush=True)
    for warning in metrics.get("warnings", []):
        print(f"[finetune] WARNING {spec.name}: {warning}", flush=True)
    return metrics


def unreadable_facts(spec: TaskSpec, cfg: FinetuneConfig, dev_predictions: np.ndarray,
                     test_predictions: np.ndarray) -> dict[str, Any]:
    """A generating T5: the share of dev generations that are no label word (no number),
    the unreadable test rows, and a warning past finetune.max_unreadable_fraction."""
    count = int(unreadable_rows(dev_predictions).sum())
    fraction = count / max(1, len(dev_predictions))
    facts: dict[str, Any] = {"unreadable_fraction": fraction,
                             "test_unreadable_predictions": int(unreadable_rows(test_predictions).sum())}
    if fraction > cfg.max_unreadable_fraction:
        if spec.is_regression:
            expected, scored, advice = "a number", "scored as 0.0", "train longer or on more examples"
        else:
            expected = "a label word (" + ", ".join(label_words(spec)) + ")"
            scored, advice = "scored as wrong", "train longer or on more examples, or set finetune.t5_scoring: rank"
        facts["warnings"] = [
            f"{count} of {len(dev_predictions)} dev generations ({fraction:.0%}) are not {expected}: they are "
            f"{scored} and written as {UNREADABLE} in {DEV_PREDICTIONS_NAME}, so the dev scores mostly measure "
            f"whether the model has learnt the output format, not the task: {advice} "
            f"(finetune.max_unreadable_fraction={cfg.max_unreadable_fraction} sets this warning's threshold)"]
    return facts


def prepare_glue(spec: TaskSpec, cfg: FinetuneConfig, *, source: dict[str, Any], data_dir: Path,
                 seed: int) -> PreparedTask:
    """Seeded train/dev subsets and the full test split, tokenized for the model; for a
    T5, as text to text (`stages.finetune.text_to_text`). data: {"splits": TaskExamples
    per split, "predictions": head outputs -> class ids or scores for the files (-1 / NaN:
    unreadable), "scored": head outputs -> what the metrics are computed on,
    "generations": a generating T5's outputs -> texts, else None}."""
    tokenizer = load_task_tokenizer(source["tokenizer"], cfg.max_seq_len)
    if cfg.source == "hub":
        from stages.finetune.hub import read_glue_split

        read = partial(read_glue_split, spec)
    else:
        read = partial(read_split, spec, data_dir)
    splits = {
        "train": read("train").sample(cfg.max_train_examples, seed),
        "dev": read("dev").sample(cfg.max_eval_examples, seed),
        "test": read("test"),
    }
    encode, score = partial(encode_texts, tokenizer), partial(glue_scores, spec)
    predictions = scored = partial(predictions_from_outputs, spec)
    generations, how = None, ""
    if source.get("family") == "t5":
        from stages.finetune import text_to_text
        from stages.finetune.text_to_text.rank import ranks_labels

        encode = partial(text_to_text.encode_text_to_text, tokenizer, spec)
        how = ", as text to text"
        if ranks_labels(spec, cfg.t5_scoring):  # outputs are label-word log-likelihoods: scored like logits
            how += ", predicted by ranking the label words"
        else:
            score = partial(text_to_text.text_to_text_scores, spec, source["tokenizer"])
            predictions = partial(text_to_text.file_predictions, spec, source["tokenizer"])
            scored = partial(text_to_text.scored_predictions, spec, source["tokenizer"])
            generations = partial(text_to_text.generated_texts, source["tokenizer"])
    return PreparedTask(
        encoded={split: encode(ex.texts, ex.labels) for split, ex in splits.items()},
        scorers={"dev": partial(score, splits["dev"].labels)},
        predict_splits=("dev", "test"),
        data={"splits": splits, "predictions": predictions, "scored": scored, "generations": generations},
        description=f"{len(splits['train'])} train, {len(splits['dev'])} dev, {len(splits['test'])} test "
                    f"examples{how}")


def glue_scores(spec: TaskSpec, labels: np.ndarray, outputs: np.ndarray) -> dict[str, float]:
    """Head outputs (N, num_labels) -> the task's GLUE metrics. Rank 0 scores each
    epoch's dev predictions with it, the driver the final ones."""
    return compute_metrics(spec.metrics, predictions_from_outputs(spec, outputs), labels)
