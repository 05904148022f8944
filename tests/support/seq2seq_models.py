"""Pretrain-stage-shaped `model/` folders for sequence-to-sequence tests: a tiny random
T5, original Transformer or GPT, with a tokenizer trained by the family's recipe on
Multi30k's English and German (one shared vocabulary, as `configs/transformer-multi30k.yaml`
trains it). No Hugging Face export (the Transformer has no transformers class)."""

from __future__ import annotations

import shutil
from pathlib import Path

import torch

from stages.models import build_model, save_pretrained
from tests.conftest import DATA_DIR
from tests.support.pretrained_dirs import train_tokenizer

MULTI30K = DATA_DIR / "mt" / "multi30k"
ARCHITECTURES = {
    "t5": ("t5", {"num_layers": 2, "hidden_size": 32, "num_heads": 2, "ff_size": 64}),
    "transformer": ("t5", {"num_layers": 2, "hidden_size": 32, "num_heads": 2, "ff_size": 64,
                           "variant": "transformer", "feed_forward": "relu", "tie_word_embeddings": True}),
    "gpt": ("gpt", {"num_layers": 2, "hidden_size": 32, "num_heads": 2}),
}


def parallel_texts(num_lines: int = 2000) -> list[str]:
    """The first lines of Multi30k train.en and train.de together."""
    return [line for lang in ("en", "de")
            for line in (MULTI30K / f"train.{lang}").read_text(encoding="utf-8").splitlines()[:num_lines]]


def write_seq2seq_model(root: Path, kind: str, *, vocab_size: int = 600, seed: int = 0) -> Path:
    """root/model/ (model.safetensors, model_config.json, tokenizer.json); returns it."""
    family, architecture = ARCHITECTURES[kind]
    tokenizer, _ = train_tokenizer(family, vocab_size, parallel_texts())
    token_ids = {}
    if family == "t5":
        token_ids = {"pad_token_id": tokenizer.token_to_id("<pad>"), "eos_token_id": tokenizer.token_to_id("</s>"),
                     "decoder_start_token_id": tokenizer.token_to_id("<pad>")}
    torch.manual_seed(seed)
    model = build_model({"family": family, "dropout": 0.0, **architecture}, vocab_size=tokenizer.get_vocab_size(),
                        max_seq_len=256 if family == "gpt" else None, **token_ids)
    model_dir = Path(root) / "model"
    save_pretrained(model, model_dir)
    tokenizer.save(str(model_dir / "tokenizer.json"))
    return model_dir
