"""The family configs, their shared rules and the preset table import no torch: the
pretrain config validates `pretrain.model` through them, and `pretrain plan` stays light."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_importing_the_model_configs_imports_no_torch():
    code = ("import sys\nimport stages.models.gpt.config, stages.models.bert.config, stages.models.t5.config\n"
            "import stages.models.config, stages.pretrain.model_config\n"
            "assert 'torch' not in sys.modules, sorted(m for m in sys.modules if m.startswith('stages'))\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]


def test_bert_config_knows_the_activations_the_model_has():
    from stages.models.bert.config import HIDDEN_ACTS
    from stages.models.mlp import ACTIVATIONS

    assert set(HIDDEN_ACTS) == set(ACTIVATIONS)
