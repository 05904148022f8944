"""pretrain.init_from with Hugging Face GPT-2 and T5 folders (tiny models made by
transformers) and our own model folder: the model the pretrain workers build from the
checkpoint reproduces the checkpoint's logits, and a checkpoint that disagrees with
pretrain.model or with the dataset is an error naming both sides."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from stages.models import build_model, save_pretrained
from stages.pretrain.model_config import ModelConfig, model_config
from stages.pretrain.init_from import resolve_init_source
from stages.pretrain.init_weights import build_initial_model, load_initial_weights
from tests.support.pinned import import_pinned

os.environ.setdefault("HF_HUB_OFFLINE", "1")
transformers = import_pinned("transformers")
VOCAB = 96


def index_of(vocab_size: int = VOCAB, seq_len: int = 32) -> dict:
    return {"vocab_size": vocab_size, "seq_len": seq_len}


def load(folder: Path, model_cfg: ModelConfig, index: dict | None = None):
    source = resolve_init_source(str(folder), model_cfg, index or index_of(), folder / "index.json")
    model = build_initial_model(source, token_ids={})
    fresh = load_initial_weights(model, source)
    return model.eval(), fresh


@pytest.fixture(scope="module")
def gpt2_folder(tmp_path_factory) -> tuple[Path, object]:
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=VOCAB, n_positions=64, n_embd=32, n_layer=2, n_head=4)
    model = transformers.GPT2LMHeadModel(config).eval()
    folder = tmp_path_factory.mktemp("gpt2")
    model.save_pretrained(folder)
    return folder, model


@pytest.fixture(scope="module")
def t5_folder(tmp_path_factory) -> tuple[Path, object]:
    torch.manual_seed(0)
    config = transformers.T5Config(vocab_size=VOCAB, d_model=32, d_kv=8, d_ff=64, num_layers=2,
                                   num_decoder_layers=2, num_heads=4, decoder_start_token_id=0)
    model = transformers.T5ForConditionalGeneration(config).eval()
    folder = tmp_path_factory.mktemp("t5")
    model.save_pretrained(folder)
    return folder, model


def test_gpt2_checkpoint_gives_the_hugging_face_logits(gpt2_folder):
    folder, hf = gpt2_folder
    ours, fresh = load(folder, model_config(family="gpt"))
    ids = torch.randint(0, VOCAB, (2, 16), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        theirs = hf(ids).logits
        logits = ours(ids)
    assert fresh == [] and ours.config.max_seq_len == 64 and ours.config.num_layers == 2
    torch.testing.assert_close(logits, theirs, atol=1e-4, rtol=0)


def test_a_bare_gpt2_model_in_a_pytorch_bin_loads_with_the_tied_head(gpt2_folder, tmp_path):
    folder, hf = gpt2_folder
    (tmp_path / "config.json").write_text((folder / "config.json").read_text())
    torch.save(hf.transformer.state_dict(), tmp_path / "pytorch_model.bin")  # GPT2Model: no prefix, no head
    ours, _ = load(tmp_path, model_config(family="gpt"))
    ids = torch.arange(12).unsqueeze(0)
    with torch.no_grad():
        torch.testing.assert_close(ours(ids), hf(ids).logits, atol=1e-4, rtol=0)


def test_t5_checkpoint_gives_the_hugging_face_logits(t5_folder):
    folder, hf = t5_folder
    ours, fresh = load(folder, model_config(family="t5"))
    generator = torch.Generator().manual_seed(2)
    input_ids = torch.randint(2, VOCAB, (2, 12), generator=generator)
    decoder_ids = torch.randint(2, VOCAB, (2, 7), generator=generator)
    with torch.no_grad():
        theirs = hf(input_ids=input_ids, decoder_input_ids=decoder_ids).logits
        logits = ours(input_ids, decoder_input_ids=decoder_ids)[0]
    assert fresh == []
    torch.testing.assert_close(logits, theirs, atol=1e-4, rtol=0)


def test_our_own_model_folder_loads_as_saved(tmp_path):
    torch.manual_seed(3)
    saved = build_model({"family": "bert", "num_layers": 1, "hidden_size": 32, "num_heads": 2}, vocab_size=VOCAB,
                        max_seq_len=48)
    save_pretrained(saved, tmp_path)
    ours, fresh = load(tmp_path, model_config(family="bert", num_layers=1))
    assert fresh == []
    for name, tensor in saved.state_dict().items():
        assert torch.equal(ours.state_dict()[name], tensor), name


def test_a_shape_key_that_disagrees_names_both_sides(gpt2_folder, t5_folder):
    folder, _ = gpt2_folder
    with pytest.raises(ValueError, match=r"pretrain.model.hidden_size=128 but .*config.json has n_embd=32"):
        load(folder, model_config(family="gpt", hidden_size=128))
    folder, _ = t5_folder
    with pytest.raises(ValueError, match=r"pretrain.model.ff_size=256 but .*config.json has d_ff=64"):
        load(folder, model_config(family="t5", ff_size=256))
    with pytest.raises(ValueError, match=r"family='gpt' but .*config.json describes a 't5' model"):
        load(folder, model_config(family="gpt"))


def test_the_dataset_vocabulary_and_length_must_fit_the_checkpoint(gpt2_folder):
    folder, _ = gpt2_folder
    with pytest.raises(ValueError, match=r"index.json vocab_size=200\).*config.json vocab_size=96\).*"
                                         r"tokenizer.from: "):
        load(folder, model_config(family="gpt"), index_of(vocab_size=200))
    with pytest.raises(ValueError, match=r"index.json seq_len=128\).*config.json n_positions=64\)"):
        load(folder, model_config(family="gpt"), index_of(seq_len=128))


def test_weights_that_do_not_fit_their_config_are_named(gpt2_folder, tmp_path):
    folder, hf = gpt2_folder
    (tmp_path / "config.json").write_text((folder / "config.json").read_text())
    state = {k: v for k, v in hf.state_dict().items() if ".h.1." not in k}  # the second block is gone
    torch.save(state, tmp_path / "pytorch_model.bin")
    with pytest.raises(ValueError, match=r"pytorch_model.bin: lacks 12 tensors that .*config.json describes"):
        load(tmp_path, model_config(family="gpt"))


@pytest.mark.parametrize("tied", [False, True])
def test_llama_checkpoint_gives_the_hugging_face_logits(tmp_path, tied):
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                      tie_word_embeddings=tied)
    hf = transformers.LlamaForCausalLM(config).eval()
    hf.save_pretrained(tmp_path)
    ours, fresh = load(tmp_path, model_config(family="gpt", variant="llama"))
    ids = torch.randint(0, VOCAB, (2, 16), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        theirs = hf(ids).logits
        logits = ours(ids)
    assert fresh == [] and ours.config.variant == "llama" and ours.config.num_kv_heads == 2
    torch.testing.assert_close(logits, theirs, atol=1e-4, rtol=0)
    with pytest.raises(ValueError, match="num_key_value_heads=2"):
        load(tmp_path, model_config(family="gpt", variant="llama", num_heads=4, num_kv_heads=1))
