"""`gpus_per_worker` in the pretrain and finetune sections: CPU by default, one GPU per
worker when asked, anything else refused with the key named."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from cluster.resources import required_resources
from pipeline.config import ConfigError, load_config
from stages.finetune.config import FinetuneConfig
from stages.pretrain.config import PretrainConfig

REPO_ROOT = Path(__file__).resolve().parents[2]
SECTIONS = [PretrainConfig, FinetuneConfig]


@pytest.mark.parametrize("section", SECTIONS)
def test_cpu_training_is_the_default_and_one_gpu_per_worker_is_accepted(section):
    assert section().gpus_per_worker == 0
    assert section(gpus_per_worker=1).gpus_per_worker == 1
    assert "gloo" in section.model_fields["gpus_per_worker"].description
    assert "NCCL" in section.model_fields["gpus_per_worker"].description


@pytest.mark.parametrize("section", SECTIONS)
@pytest.mark.parametrize("value, message", [(-1, "greater than or equal to 0"), (2, "less than or equal to 1")])
def test_bad_gpu_counts_are_rejected(section, value, message):
    with pytest.raises(ValidationError, match=message):
        section(gpus_per_worker=value)


def test_an_override_reaches_the_resource_check():
    cfg = load_config(REPO_ROOT / "configs" / "gpt-tiny.yaml",
                      ["pretrain.gpus_per_worker=1", "pretrain.num_workers=2", "finetune.num_workers=3"])
    assert cfg.pretrain.gpus_per_worker == 1 and cfg.finetune.gpus_per_worker == 0
    assert required_resources(cfg) == {"CPU": 3.0, "GPU": 2.0}
    assert "GPU" not in required_resources(load_config(REPO_ROOT / "configs" / "gpt-tiny.yaml"))


def test_an_unsupported_gpu_count_names_the_key():
    with pytest.raises(ConfigError, match="finetune.gpus_per_worker"):
        load_config(REPO_ROOT / "configs" / "gpt-tiny.yaml", ["finetune.gpus_per_worker=2"])
