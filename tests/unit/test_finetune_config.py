"""The finetune config section: defaults, documentation, and errors that name the fix."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from stages.finetune.config import FinetuneConfig


def test_defaults_are_the_demo_setting():
    cfg = FinetuneConfig()
    assert cfg.tasks == ["sst2"] and cfg.max_train_examples == 2000
    assert cfg.epochs is None and cfg.lr is None and cfg.micro_batch_size is None  # per-task defaults
    assert cfg.max_seq_len == 64 and cfg.seed is None


def test_every_key_is_documented():
    undocumented = [name for name, field in FinetuneConfig.model_fields.items() if not field.description]
    assert undocumented == []


@pytest.mark.parametrize("values, message", [
    ({"tasks": ["sst3"]}, "unknown task 'sst3'; did you mean 'sst2'? valid tasks: cola, "),
    ({"tasks": []}, "list at least one task"),
    ({"tasks": ["rte", "rte"]}, "tasks ['rte'] are listed twice"),
    ({"warmup_fraction": 1.0}, "less than 1"),
    ({"max_train_examples": 0}, "greater than or equal to 1"),
    ({"precision": "fp16"}, "'fp32' or 'bf16'"),
    ({"epoch": 2}, "Extra inputs are not permitted"),
])
def test_bad_values_are_rejected_with_the_fix(values, message):
    with pytest.raises(ValidationError) as error:
        FinetuneConfig(**values)
    assert message in str(error.value)


def test_all_nine_glue_tasks_are_accepted():
    tasks = ["cola", "sst2", "mrpc", "stsb", "qqp", "mnli", "mnli_mm", "qnli", "rte", "wnli"]
    assert FinetuneConfig(tasks=tasks, max_train_examples=None).tasks == tasks
