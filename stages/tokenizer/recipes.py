"""Tokenizer recipes: which parts of Hugging Face `tokenizers` make up each kind.

A recipe is a function config -> TokenizerRecipe; `build_tokenizer` assembles any recipe
the same way. Adding WordPiece (BERT) or Unigram (T5) means writing one more recipe
function with its own normalizer, pre-tokenizer, model, trainer, post-processor and
decoder, and registering it in RECIPES; nothing else branches on the kind.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tokenizers import (
    Tokenizer,
    decoders,
    models,
    normalizers,
    pre_tokenizers,
    processors,
    trainers,
)

from stages.tokenizer.config import TokenizerConfig

END_OF_TEXT = "<|endoftext|>"
PAD = "<|pad|>"


@dataclass(frozen=True)
class TokenizerRecipe:
    model: models.Model
    trainer: trainers.Trainer
    normalizer: normalizers.Normalizer | None
    pre_tokenizer: pre_tokenizers.PreTokenizer | None
    post_processor: processors.PostProcessor | None
    decoder: decoders.Decoder | None
    # Role -> token, in Hugging Face's names (eos_token, pad_token, cls_token, ...). Written
    # to special_tokens_map.json so that later stages and `transformers` find them by role.
    special_tokens: dict[str, str]


def byte_level_bpe(config: TokenizerConfig) -> TokenizerRecipe:
    """GPT-2: bytes as the base alphabet (never an unknown token), GPT-2's regex split,
    no normalizer (ingest already normalized), decode(encode(text)) == text."""
    special = [END_OF_TEXT, PAD]  # the trainer gives them ids 0 and 1, in this order
    return TokenizerRecipe(
        model=models.BPE(),
        trainer=trainers.BpeTrainer(
            vocab_size=config.vocab_size,
            min_frequency=config.min_frequency,
            special_tokens=special,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,
        ),
        normalizer=None,
        pre_tokenizer=pre_tokenizers.ByteLevel(add_prefix_space=config.add_prefix_space),
        post_processor=processors.ByteLevel(trim_offsets=False),
        decoder=decoders.ByteLevel(),
        # As Hugging Face's gpt2: one token marks the start, the end and the unknown.
        special_tokens={"bos_token": END_OF_TEXT, "eos_token": END_OF_TEXT,
                        "unk_token": END_OF_TEXT, "pad_token": PAD},
    )


RECIPES: dict[str, Callable[[TokenizerConfig], TokenizerRecipe]] = {
    "bpe": byte_level_bpe,
}


def build_recipe(config: TokenizerConfig) -> TokenizerRecipe:
    return RECIPES[config.kind](config)


def build_tokenizer(recipe: TokenizerRecipe) -> Tokenizer:
    """An untrained tokenizer with every part of the recipe in its slot."""
    tokenizer = Tokenizer(recipe.model)
    for slot in ("normalizer", "pre_tokenizer", "post_processor", "decoder"):
        part = getattr(recipe, slot)
        if part is not None:
            setattr(tokenizer, slot, part)
    return tokenizer
