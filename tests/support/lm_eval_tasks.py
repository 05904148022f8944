"""lm-evaluation-harness 0.4.13 tasks built on our rows, for parity tests (lm-eval is the
`.[eval]` extra, which `make install` installs).

Two ways to get lm-eval's side of a task, both on rows we read (no downloads):

    task = task_from_spec(spec, eval_rows, demo_rows, num_fewshot=3)     # our spec's templates
    task = task_from_lm_eval_yaml("wikitext/wikitext.yaml", {"test": pages})   # lm-eval's own task

Split names are those a parity run on our files must declare (see stages/evaluate/fewshot.py):
the evaluated file as test_split with fewshot_split the same split, or validation +
training splits; either way lm-eval draws k + 1 demonstrations and drops the evaluated row,
as we do. The few-shot sampler is seeded with 1234, our default.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import datasets
import lm_eval
from lm_eval.api.task import ConfigurableTask
# lm-eval's own YAML loader (resolves `!function` and `include:`); private, but it is what
# its TaskManager uses, so the configs are read exactly as lm-eval reads them.
from lm_eval.tasks._yaml_loader import load_yaml

from stages.evaluate.spec import TaskSpec

LM_EVAL_TASKS = Path(lm_eval.__file__).parent / "tasks"
FEWSHOT_SEED = 1234
OUTPUT_TYPE = {"multiple_choice": "multiple_choice", "cloze": "loglikelihood", "generation": "generate_until"}
# Keys of lm-eval's task YAMLs that point at Hugging Face data; we hand it rows instead.
_DOWNLOAD_KEYS = ("dataset_path", "dataset_name", "dataset_kwargs", "training_split", "validation_split",
                  "test_split", "fewshot_split")


def task_from_spec(spec: TaskSpec, eval_rows: list[dict[str, Any]], demo_rows: list[dict[str, Any]], *,
                   num_fewshot: int = 0, metrics: list[str] | None = None) -> ConfigurableTask:
    """lm-eval's ConfigurableTask with our spec's templates, on our rows."""
    config: dict[str, Any] = {
        "task": spec.name, "output_type": OUTPUT_TYPE[spec.kind], "doc_to_text": spec.doc_to_text,
        "doc_to_target": spec.doc_to_target, "target_delimiter": spec.target_delimiter,
        "fewshot_delimiter": spec.fewshot_delimiter, "description": spec.description,
        "num_fewshot": num_fewshot,
        "metric_list": [{"metric": "exact_match" if spec.kind == "generation" else "acc"}]}
    if spec.kind == "cloze":
        config["metric_list"] = [{"metric": "perplexity", "aggregation": "perplexity", "higher_is_better": False},
                                 {"metric": "acc", "aggregation": "mean", "higher_is_better": True}]
    if spec.kind == "multiple_choice":
        config["metric_list"] = [{"metric": name, "aggregation": "mean", "higher_is_better": True}
                                 for name in metrics or ("acc", "acc_norm", "acc_bytes")]
        config["doc_to_choice"] = spec.doc_to_choice
    if spec.kind == "generation":
        config["generation_kwargs"] = {"until": list(spec.until)}
    if spec.eval_split == spec.demonstration_split:
        splits = {"test": eval_rows}
        config.update(test_split="test", fewshot_split="test")
    else:
        splits = {"validation": eval_rows, "train": demo_rows}
        config.update(validation_split="validation", training_split="train")
    return _build(config, splits)


def task_from_lm_eval_yaml(relative_path: str, splits: dict[str, list[dict[str, Any]]], *,
                           num_fewshot: int = 0, **overrides: Any) -> ConfigurableTask:
    """lm-eval's own task (its YAML under lm_eval/tasks/, Python functions included) on our
    rows; `splits` names the splits and `overrides` says which is which (test_split=...)."""
    config = {key: value for key, value in load_yaml(LM_EVAL_TASKS / relative_path).items()
              if key not in _DOWNLOAD_KEYS}
    config.update(num_fewshot=num_fewshot, **overrides)
    return _build(config, splits)


def _build(config: dict[str, Any], splits: dict[str, list[dict[str, Any]]]) -> ConfigurableTask:
    logging.getLogger("lm_eval").setLevel(logging.ERROR)  # warnings about unset aggregations etc.
    dataset = datasets.DatasetDict({name: datasets.Dataset.from_list(rows) for name, rows in splits.items()})
    config["custom_dataset"] = lambda **_: dataset
    task = ConfigurableTask(config=config)
    task.set_fewshot_seed(FEWSHOT_SEED)
    return task
