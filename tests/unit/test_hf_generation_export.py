"""The Hugging Face folder a pretrain run exports is ready to generate with: config.json and
generation_config.json carry the tokenizer's bos / eos / pad ids (T5: its decoder start),
the tokenizer files name the roles, and transformers' own pipeline("text-generation")
stops at the end of text and never runs past the model's positions."""

from __future__ import annotations

import json
import os

import pytest
import torch

from stages.models import load_pretrained
from stages.models.hf_export import export_hf
from tests.support.pinned import import_pinned
from tests.support.pretrained_dirs import write_pretrained

transformers = import_pinned("transformers")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tests/conftest.py

GPT = {"num_layers": 1, "hidden_size": 32, "num_heads": 2}


@pytest.fixture(scope="module")
def gpt_dir(tmp_path_factory):
    return write_pretrained(tmp_path_factory.mktemp("gpt"), "gpt", GPT, vocab_size=512, max_seq_len=24)


def tokenizer_ids(root, *tokens):
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(root / "model" / "tokenizer.json"))
    return [tokenizer.token_to_id(token) for token in tokens]


def test_gpt_export_carries_special_token_ids_and_generation_config(gpt_dir):
    eos, pad = tokenizer_ids(gpt_dir, "<|endoftext|>", "<|pad|>")
    config = json.loads((gpt_dir / "hf" / "config.json").read_text())
    assert (config["bos_token_id"], config["eos_token_id"], config["pad_token_id"]) == (eos, eos, pad)
    generation = transformers.GenerationConfig.from_pretrained(gpt_dir / "hf")
    assert (generation.bos_token_id, generation.eos_token_id, generation.pad_token_id) == (eos, eos, pad)
    assert generation.max_length == 24  # the model's positions
    tokenizer = transformers.AutoTokenizer.from_pretrained(gpt_dir / "hf")
    assert (tokenizer.eos_token_id, tokenizer.pad_token_id, tokenizer.bos_token_id) == (eos, pad, eos)
    special_map = json.loads((gpt_dir / "hf" / "special_tokens_map.json").read_text())
    assert special_map["eos_token"] == "<|endoftext|>"


def test_text_generation_pipeline_stops_at_end_of_text(gpt_dir, tmp_path):
    """A model made to say <|endoftext|> after one free token: transformers' pipeline must
    stop there, where without the ids it ran on to max_new_tokens."""
    eos, = tokenizer_ids(gpt_dir, "<|endoftext|>")
    model = load_pretrained(gpt_dir / "model").eval()
    with torch.no_grad():  # every position's output is the end-of-text embedding's direction
        model.token_embedding.weight[eos] *= 20
        model.final_norm.weight.zero_()
        model.final_norm.bias.copy_(model.token_embedding.weight[eos])
    special = json.loads((gpt_dir / "hf" / "tokenizer_config.json").read_text())
    special = {k: v for k, v in special.items() if k.endswith("_token")}
    export_hf(model, tmp_path / "hf", gpt_dir / "model" / "tokenizer.json", special)
    generator = transformers.pipeline("text-generation", model=str(tmp_path / "hf"))
    prompt = "The old house"
    out = generator(prompt, max_new_tokens=10, do_sample=False, return_tensors=True)
    prompt_ids = generator.tokenizer(prompt)["input_ids"]
    assert out[0]["generated_token_ids"][len(prompt_ids):] == [eos]  # one token: the end of text
    text = generator(prompt, max_new_tokens=10, do_sample=False)[0]["generated_text"]
    assert text == prompt
    # and without max_new_tokens, generation ends at the model's context rather than failing
    assert generator("The", do_sample=False)[0]["generated_text"] == "The"


def test_t5_export_carries_decoder_start_and_end_ids(tmp_path):
    root = write_pretrained(tmp_path, "t5", {"num_layers": 1, "hidden_size": 32, "num_heads": 2, "ff_size": 64},
                            vocab_size=512, max_seq_len=None)
    pad, eos = tokenizer_ids(root, "<pad>", "</s>")
    generation = transformers.GenerationConfig.from_pretrained(root / "hf")
    assert (generation.eos_token_id, generation.pad_token_id, generation.decoder_start_token_id) == (eos, pad, pad)
    model = transformers.AutoModelForSeq2SeqLM.from_pretrained(root / "hf")
    assert model.generation_config.eos_token_id == eos
    tokenizer = transformers.AutoTokenizer.from_pretrained(root / "hf")
    assert (tokenizer.eos_token_id, tokenizer.pad_token_id) == (eos, pad)
