"""Per-task defaults from the BERT paper: filled only where the config leaves a key unset."""

from __future__ import annotations

import pytest

from stages.finetune.config import FinetuneConfig
from stages.finetune.task_cache import task_fingerprint
from stages.finetune.task_defaults import TASK_DEFAULTS, config_for_task
from stages.finetune.tasks import task_names
from tests.support.model_sources import folder_source

SOURCE = folder_source("/nonexistent/model")


def test_every_task_has_paper_defaults():
    assert sorted(TASK_DEFAULTS) == task_names()


@pytest.mark.parametrize("task, lr, epochs, batch", [
    ("sst2", 2e-5, 3, 32), ("rte", 2e-5, 3, 32), ("stsb", 2e-5, 3, 32),
    ("squad", 5e-5, 3, 32), ("squad_v2", 5e-5, 2, 48), ("conll2003", 5e-5, 3, 32),
])
def test_unset_keys_take_the_papers_values(task, lr, epochs, batch):
    cfg = config_for_task(FinetuneConfig(tasks=[task], num_workers=1), task)
    assert (cfg.lr, cfg.epochs, cfg.micro_batch_size) == (lr, epochs, batch)
    assert cfg.warmup_fraction == 0.1


def test_the_global_batch_is_split_over_workers_and_accumulation_rounded_up():
    cfg = FinetuneConfig(num_workers=2, gradient_accumulation_steps=2)
    assert config_for_task(cfg, "sst2").micro_batch_size == 8  # 8 x 2 x 2 = 32
    assert config_for_task(cfg, "squad_v2").micro_batch_size == 12  # 48
    assert config_for_task(FinetuneConfig(num_workers=5), "sst2").micro_batch_size == 7  # 35 >= 32


def test_explicit_values_win_and_the_input_is_not_changed():
    cfg = FinetuneConfig(tasks=["squad"], lr=1e-4, epochs=1, micro_batch_size=4)
    resolved = config_for_task(cfg, "squad")
    assert (resolved.lr, resolved.epochs, resolved.micro_batch_size) == (1e-4, 1, 4)
    partly = config_for_task(FinetuneConfig(epochs=5), "squad")
    assert (partly.lr, partly.epochs) == (5e-5, 5)
    assert FinetuneConfig().lr is None  # the section itself keeps null


def test_writing_the_default_gives_the_same_task_fingerprint_as_leaving_it_unset():
    unset = config_for_task(FinetuneConfig(num_workers=2), "rte")
    explicit = config_for_task(FinetuneConfig(num_workers=2, lr=2e-5, epochs=3, micro_batch_size=16), "rte")
    other = config_for_task(FinetuneConfig(num_workers=2, lr=3e-5), "rte")
    fingerprint = lambda cfg: task_fingerprint("rte", cfg, seed=0, source=SOURCE)  # noqa: E731
    assert fingerprint(unset) == fingerprint(explicit) != fingerprint(other)
