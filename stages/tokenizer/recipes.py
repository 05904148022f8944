"""Tokenizer recipes: which parts of Hugging Face `tokenizers` make up each kind.

A recipe is a function config -> TokenizerRecipe; `build_tokenizer` assembles any recipe
the same way, and the stage trains any of them the same way. A new kind is one more
recipe function with its own normalizer, pre-tokenizer, model, trainer, post-processor
and decoder, registered in RECIPES; nothing else branches on the kind.

Special token ids: the trainer gives `special_tokens` of its constructor the first ids, in
order, so post-processor templates can name them by id before training. `added_tokens`
are appended after training at the top of the vocabulary (T5's sentinels: <extra_id_0>
is the last id), and the trainer is asked for that many fewer tokens.
"""

from __future__ import annotations

import json
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
    # Role -> token, in Hugging Face's names (eos_token, pad_token, cls_token, ...), or
    # role -> list for additional_special_tokens. Written to special_tokens_map.json so that
    # later stages and `transformers` find them by role.
    special_tokens: dict[str, str | list[str]]
    # The model's unknown token (counted for the unknown-token rate); None: cannot occur.
    unknown_token: str | None = None
    added_tokens: tuple[str, ...] = ()
    # Applied to the trained tokenizer before added_tokens (e.g. canonical_unigram).
    canonicalize: Callable[[Tokenizer], Tokenizer] | None = None
    # What `transformers` returns from tokenizer(...): BERT also needs token_type_ids.
    model_input_names: tuple[str, ...] = ("input_ids", "attention_mask")


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


BERT_SPECIAL = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")  # ids 0-4


def bert_wordpiece(config: TokenizerConfig) -> TokenizerRecipe:
    """BERT: BertNormalizer (lower-case and accent options), whitespace-and-punctuation
    split, WordPiece with ## continuations, [CLS] A [SEP] B [SEP] with token types 0/1."""
    pad, unk, cls, sep, mask = BERT_SPECIAL
    return TokenizerRecipe(
        model=models.WordPiece(unk_token=unk, continuing_subword_prefix="##"),
        trainer=trainers.WordPieceTrainer(
            vocab_size=config.vocab_size,
            min_frequency=config.min_frequency,
            special_tokens=list(BERT_SPECIAL),
            continuing_subword_prefix="##",
            show_progress=False,
        ),
        normalizer=normalizers.BertNormalizer(
            clean_text=True, handle_chinese_chars=True, strip_accents=config.strip_accents,
            lowercase=config.lowercase),
        pre_tokenizer=pre_tokenizers.BertPreTokenizer(),
        post_processor=processors.TemplateProcessing(
            single=f"{cls}:0 $A:0 {sep}:0",
            pair=f"{cls}:0 $A:0 {sep}:0 $B:1 {sep}:1",
            special_tokens=[(cls, BERT_SPECIAL.index(cls)), (sep, BERT_SPECIAL.index(sep))],
        ),
        decoder=decoders.WordPiece(prefix="##"),
        special_tokens={"pad_token": pad, "unk_token": unk, "cls_token": cls,
                        "sep_token": sep, "mask_token": mask},
        unknown_token=unk,
        model_input_names=("input_ids", "token_type_ids", "attention_mask"),
        canonicalize=canonical_wordpiece,
    )


T5_SPECIAL = ("<pad>", "</s>", "<unk>")  # ids 0-2, as in T5
T5_NUM_SENTINELS = 100


def t5_unigram(config: TokenizerConfig) -> TokenizerRecipe:
    """T5: SentencePiece-style Unigram over Metaspace pieces ("▁word"), </s> appended to
    every sequence, 100 <extra_id_N> sentinels for span corruption at the top ids."""
    pad, eos, unk = T5_SPECIAL
    # T5 puts <extra_id_0> last: add them from 99 down to 0.
    sentinels = tuple(f"<extra_id_{i}>" for i in reversed(range(T5_NUM_SENTINELS)))
    return TokenizerRecipe(
        model=models.Unigram(),
        trainer=trainers.UnigramTrainer(
            vocab_size=config.vocab_size - len(sentinels),
            special_tokens=list(T5_SPECIAL),
            unk_token=unk,
            show_progress=False,
        ),
        normalizer=None,  # ingest already normalized (NFC/NFKC) and collapsed whitespace
        pre_tokenizer=pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always"),
        post_processor=processors.TemplateProcessing(
            single=f"$A:0 {eos}:0", pair=f"$A:0 {eos}:0 $B:1 {eos}:1",
            special_tokens=[(eos, T5_SPECIAL.index(eos))],
        ),
        decoder=decoders.Metaspace(replacement="▁", prepend_scheme="always"),
        special_tokens={"pad_token": pad, "eos_token": eos, "unk_token": unk,
                        "additional_special_tokens": list(reversed(sentinels))},
        unknown_token=unk,
        added_tokens=sentinels,
        canonicalize=canonical_unigram,
    )


RECIPES: dict[str, Callable[[TokenizerConfig], TokenizerRecipe]] = {
    "bpe": byte_level_bpe,
    "wordpiece": bert_wordpiece,
    "unigram": t5_unigram,
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


def finish_tokenizer(tokenizer: Tokenizer, recipe: TokenizerRecipe) -> Tokenizer:
    """After training: canonicalize (if the recipe says how), then append the recipe's
    added special tokens at the top ids."""
    if recipe.canonicalize is not None:
        tokenizer = recipe.canonicalize(tokenizer)
    tokenizer.add_special_tokens(list(recipe.added_tokens))
    return tokenizer


_SCORE_DECIMALS = 6


def canonical_unigram(tokenizer: Tokenizer) -> Tokenizer:
    """Make a trained Unigram tokenizer.json the same bytes on every run.

    The trainer iterates Rust hash maps (randomly seeded) and sums log-probabilities on
    several threads, so equal-score pieces come out in any order and scores vary in their
    last bits. Canonical form: special tokens keep their ids; scores rounded to 1e-6;
    pieces sorted by (score descending, piece). The characters the trainer appends so that
    every character is covered get scores min - k * 1e-4 in hash order: those scores are
    re-assigned in piece order.
    """
    state = json.loads(tokenizer.to_str())
    vocab = state["model"]["vocab"]
    num_special = sum(1 for token in state["added_tokens"] if token["special"])
    head = vocab[:num_special]
    rest = sorted(([piece, round(score, _SCORE_DECIMALS)] for piece, score in vocab[num_special:]),
                  key=lambda item: (-item[1], item[0]))
    # The added characters: every single character scored below all multi-character pieces.
    lowest_piece = min((score for piece, score in rest if len(piece) > 1), default=0.0)
    tail = len(rest)
    while tail > 0 and len(rest[tail - 1][0]) == 1 and rest[tail - 1][1] < lowest_piece:
        tail -= 1
    scores = [score for _, score in rest[tail:]]
    rest[tail:] = [[piece, score] for piece, score in zip(
        sorted(piece for piece, _ in rest[tail:]), scores, strict=True)]
    state["model"]["vocab"] = head + rest
    return Tokenizer.from_str(json.dumps(state, ensure_ascii=False))


def canonical_wordpiece(tokenizer: Tokenizer) -> Tokenizer:
    """Make a trained WordPiece tokenizer.json the same bytes on every run: the trainer
    numbers its alphabet in hash-map order, and that order breaks ties between equally
    frequent merges. WordPiece encodes by longest match, so ids carry no rank: special
    tokens keep theirs, then the alphabet (characters, ##characters), then the learned
    words, each in string order. This fixes the ids, not the set of words: the hash order
    also breaks ties between equally frequent merges, so now and then a run learns another
    word (seen at vocab 2048 on two books). That is upstream, huggingface/tokenizers#1794,
    with a fix proposed in PR #2066; until it lands WordPiece training is not guaranteed
    byte-identical across runs (BPE and Unigram are)."""
    state = json.loads(tokenizer.to_str())
    vocab: dict[str, int] = state["model"]["vocab"]
    prefix = state["model"]["continuing_subword_prefix"]
    num_special = sum(1 for token in state["added_tokens"] if token["special"])
    ordered = sorted(vocab, key=vocab.get)
    special, learned = ordered[:num_special], ordered[num_special:]
    is_symbol = [len(token.removeprefix(prefix)) == 1 for token in learned]
    alphabet = sorted(token for token, symbol in zip(learned, is_symbol, strict=True) if symbol)
    words = sorted(token for token, symbol in zip(learned, is_symbol, strict=True) if not symbol)
    state["model"]["vocab"] = {token: i for i, token in enumerate(special + alphabet + words)}
    return Tokenizer.from_str(json.dumps(state, ensure_ascii=False))
