"""Folders shaped like the pretrain stage's output, written without running it: `model/`
(model.safetensors, model_config.json, tokenizer.json) and `hf/` (export_hf with the
tokenizer recipe's special tokens, as `stages.pretrain.run.export_hugging_face` writes
it). The weights are random; the tokenizer is trained by our recipe on real text.

    root = write_pretrained(tmp_path, "gpt", {"num_layers": 2, "hidden_size": 64, "num_heads": 2},
                            vocab_size=1024, max_seq_len=128)
    scorer = load_scorer(root / "model")
    hf_model = transformers.AutoModelForCausalLM.from_pretrained(root / "hf")
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import torch
from tokenizers import Tokenizer

from stages.models import build_model, save_pretrained
from stages.models.hf_export import export_hf
from stages.tokenizer.config import TokenizerConfig
from stages.tokenizer.recipes import build_recipe, build_tokenizer, finish_tokenizer
from tests.conftest import DATA_DIR

BOOK = DATA_DIR / "corpus" / "gutenberg" / "The-Dunwich-Horror.txt"
TOKENIZER_KIND = {"gpt": "bpe", "bert": "wordpiece", "t5": "unigram"}


def book_paragraphs(num_bytes: int, path: Path = BOOK) -> list[str]:
    """The first paragraphs of a real book, about num_bytes of them, whitespace collapsed."""
    paragraphs, size = [], 0
    for block in path.read_text(encoding="utf-8").split("\n\n"):
        text = " ".join(block.split())
        if text:
            paragraphs.append(text)
            size += len(text.encode())
            if size >= num_bytes:
                break
    return paragraphs


def train_tokenizer(family: str, vocab_size: int, texts: list[str]) -> tuple[Tokenizer, dict[str, Any]]:
    """(tokenizer, special tokens by role) trained by the family's recipe."""
    recipe = build_recipe(TokenizerConfig(kind=TOKENIZER_KIND[family], vocab_size=vocab_size, min_frequency=1))
    tokenizer = build_tokenizer(recipe)
    tokenizer.train_from_iterator(texts, trainer=recipe.trainer)
    return finish_tokenizer(tokenizer, recipe), recipe.special_tokens


def write_pretrained(root: Path, family: str, architecture: dict[str, Any], *, vocab_size: int = 1024,
                     max_seq_len: int | None = 128, texts: list[str] | None = None, seed: int = 0,
                     weight_scale: float = 1.0) -> Path:
    """root/model and root/hf for a random `family` model; returns root. The tokenizer is
    trained on `texts` (default: 40 KB of a book). weight_scale
    multiplies every weight after init: above 1, the random model's predictions are
    peaked (more tokens are clear argmaxes), which makes greedy checks meaningful."""
    root = Path(root)
    tokenizer, special_tokens = train_tokenizer(family, vocab_size, texts or book_paragraphs(40_000))
    tokenizer_path = root / "tokenizer" / "tokenizer.json"
    tokenizer_path.parent.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(tokenizer_path))
    token_ids = {"pad_token_id": 0} if family == "bert" else {}
    if family == "t5":
        token_ids = {"pad_token_id": tokenizer.token_to_id("<pad>"), "eos_token_id": tokenizer.token_to_id("</s>"),
                     "decoder_start_token_id": tokenizer.token_to_id("<pad>")}
    torch.manual_seed(seed)
    model = build_model({"family": family, "dropout": 0.0, **architecture}, vocab_size=tokenizer.get_vocab_size(),
                        max_seq_len=max_seq_len, **token_ids)
    if weight_scale != 1.0:
        with torch.no_grad():
            for parameter in model.parameters():
                parameter.mul_(weight_scale)
    save_pretrained(model, root / "model")
    shutil.copy2(tokenizer_path, root / "model" / "tokenizer.json")
    export_hf(model, root / "hf", tokenizer_path, special_tokens)
    return root
