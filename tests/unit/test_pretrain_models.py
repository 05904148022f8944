"""pretrain.model for the three families: each family's fields and defaults, a field set
for the wrong family is refused with the key named, and BERT / T5 build, save and load
back with the same outputs."""

from __future__ import annotations

import pytest
import torch

from pipeline.config import ConfigError, load_config
from stages.models import BertForPreTraining, T5, build_model, load_pretrained, save_pretrained
from stages.pretrain.model_config import model_config

CONFIG = "name: t\ningest:\n  sources:\n    - path: corpus/*.txt\npretrain:\n  model:\n"


def test_each_family_gets_its_own_defaults():
    assert model_config().architecture() == {"family": "gpt", "num_layers": 2, "hidden_size": 128,
                                            "num_heads": 4, "dropout": 0.0, "layer_norm_eps": 1e-5}
    bert = model_config(family="bert", hidden_size=64, num_heads=2).architecture()
    assert bert["intermediate_size"] == 256 and bert["layer_norm_eps"] == 1e-12
    t5 = model_config(family="t5", hidden_size=64, num_heads=4, num_decoder_layers=3).architecture()
    assert (t5["head_size"], t5["ff_size"], t5["num_decoder_layers"], t5["feed_forward"],
            t5["tie_word_embeddings"], t5["layer_norm_eps"]) == (16, 256, 3, "relu", True, 1e-6)


def test_a_field_of_another_family_is_refused_with_file_line_and_key(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(CONFIG + "    family: bert\n    ff_size: 256\n    intermediate_size: 256\n")
    with pytest.raises(ConfigError, match=r"c.yaml:\d+: 'pretrain.model': .*family='bert' does not use "
                                          r"ff_size \(t5 only\)"):
        load_config(path)
    path.write_text(CONFIG + "    family: t5\n    ff_size: 256\n    head_size: 8\n")
    assert load_config(path).pretrain.model.architecture()["head_size"] == 8


@pytest.mark.parametrize("family", ["bert", "t5"])
def test_build_save_and_load_round_trip(tmp_path, family):
    torch.manual_seed(0)
    section = model_config(family=family, num_layers=1, hidden_size=32, num_heads=2, dropout=0.1)
    model = build_model(section.architecture(), vocab_size=50, max_seq_len=16, pad_token_id=3, eos_token_id=4,
                        decoder_start_token_id=3)
    assert type(model) is {"bert": BertForPreTraining, "t5": T5}[family]
    assert model.config.pad_token_id == 3
    if family == "t5":  # relative positions: no max_seq_len; decoding starts from pad
        assert model.config.eos_token_id == 4 and model.config.decoder_start_token_id == 3
    save_pretrained(model, tmp_path / "model")
    loaded = load_pretrained(tmp_path / "model")
    assert type(loaded) is type(model) and loaded.config == model.config
    ids = torch.randint(5, 50, (2, 8))
    model.eval(), loaded.eval()
    with torch.no_grad():
        if family == "bert":
            expected, actual = model(ids)[:2], loaded(ids)[:2]
            assert loaded.mlm_decoder.weight is loaded.backbone.embeddings.word_embedding.weight
        else:
            expected, actual = model(ids, labels=ids)[:1], loaded(ids, labels=ids)[:1]
            assert loaded.lm_head.weight is loaded.shared.weight
    for e, a in zip(expected, actual, strict=True):
        torch.testing.assert_close(a, e, rtol=0, atol=0)


def test_finetune_starts_from_the_encoder_of_a_pretrained_bert(tmp_path):
    from stages.finetune.model_source import load_backbone, resolve_model_source
    from stages.models import Bert

    bert = build_model({"family": "bert", "num_layers": 1, "hidden_size": 16, "num_heads": 2}, 30, 12)
    save_pretrained(bert, tmp_path / "bert")
    source = resolve_model_source(None, tmp_path / "bert")
    assert source.max_seq_len == 12 and type(load_backbone(source)) is Bert
