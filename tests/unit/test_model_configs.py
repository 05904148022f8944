"""The family configs (stages/models/<family>/config.py) hold every family and variant
rule: pretrain.model refuses through them, with their message, and they import no torch
(the pretrain config validates through them, and `pretrain plan` stays light)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from stages.models.bert.config import BertConfig
from stages.models.gpt.config import GPTConfig
from stages.models.t5.config import T5Config
from pipeline.config import ConfigError, load_config
from stages.pretrain.model_config import model_config

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("keys", "family_config"), [
    (dict(rope_theta=5e5), lambda: GPTConfig(vocab_size=1, max_seq_len=1, rope_theta=5e5)),
    (dict(variant="llama", num_kv_heads=3), lambda: GPTConfig(vocab_size=1, max_seq_len=1, variant="llama",
                                                               num_kv_heads=3)),
    (dict(family="bert", share_layers="all"), lambda: BertConfig(vocab_size=1, share_layers="all")),
    (dict(family="bert", generator_size=0.5), lambda: BertConfig(vocab_size=1, generator_size=0.5)),
    (dict(family="t5", variant="transformer", feed_forward="gated-gelu"),
     lambda: T5Config(vocab_size=1, variant="transformer", feed_forward="gated-gelu", hidden_size=128)),
    (dict(family="t5", variant="albert"), lambda: T5Config(vocab_size=1, variant="albert")),
], ids=["llama-only", "kv-heads", "albert-only", "electra-only", "transformer", "variant"])
def test_the_section_refuses_with_the_family_configs_message(keys, family_config):
    with pytest.raises(ValueError) as from_config:
        family_config()
    with pytest.raises(ValidationError) as from_section:
        model_config(**keys)
    assert str(from_config.value) in str(from_section.value)


@pytest.mark.parametrize(("keys", "message"), [
    ("family: nope", "'pretrain.model.family': Input should be 'gpt', 'bert' or 't5' (got 'nope')"),
    ("family: t5\n    ff_size: 0", "'pretrain.model.ff_size': Input should be greater than or equal to 1 (got 0)"),
], ids=["unknown-family", "key-of-a-family"])
def test_the_union_on_family_reads_as_one_section(tmp_path, keys, message):
    # pretrain.model is a union of one section per family: its errors name the key, not the
    # union's tag, and an unknown family is refused as a Literal key is
    path = tmp_path / "c.yaml"
    path.write_text("name: t\ningest:\n  sources:\n    - path: corpus/*.txt\npretrain:\n  model:\n    " + keys)
    with pytest.raises(ConfigError) as refused:
        load_config(path)
    assert str(refused.value).endswith(message)


def test_each_familys_section_dumps_the_flat_record_of_every_key():
    # the dump is the pretrain fingerprint's input: the same keys whatever the family
    dumps = [model_config(family=family).model_dump() for family in ("gpt", "bert", "t5")]
    assert [list(dump) for dump in dumps[1:]] == [list(dumps[0])] * 2
    assert model_config(**dumps[2]).model_dump() == dumps[2]


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
