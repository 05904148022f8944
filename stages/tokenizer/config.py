"""Config of the tokenizer stage: which recipe, how big a vocabulary, how much text.

`kind` names a recipe (stages/tokenizer/recipes.py) that picks the parts Hugging Face
`tokenizers` composes: normalizer -> pre-tokenizer -> model (+ its trainer) ->
post-processor -> decoder, plus the special tokens and their roles. A new kind
is one new recipe function and one new value here.

Only pydantic here: the engine loads this module at startup to validate the YAML.
"""

from typing import Literal

from pydantic import Field

from stages.section import Section


class TokenizerConfig(Section):
    """Train a subword tokenizer on a seeded sample of the ingested documents."""

    kind: Literal["bpe", "wordpiece", "unigram"] = Field(
        "bpe", description="recipe: bpe = byte-level BPE as in GPT-2 (no unknown tokens, "
        "<|endoftext|> <|pad|>); wordpiece = BERT ([PAD] [UNK] [CLS] [SEP] [MASK], ## "
        "continuations, [CLS] A [SEP] B [SEP] with token type ids); unigram = T5 (Metaspace, "
        "<pad> </s> <unk>, </s> appended, 100 <extra_id_N> sentinels at the top ids)")
    vocab_size: int = Field(
        8192, ge=512, le=1_000_000, description="target vocabulary size, special tokens and "
        "the 256 byte symbols included; <= 65535 lets the dataset store ids as uint16")
    min_frequency: int = Field(
        2, ge=1, description="a pair of symbols merges only if it occurs at least this often "
        "in the sample")
    sample_bytes: int = Field(
        50_000_000, ge=1_000, description="UTF-8 bytes of text to train on, drawn uniformly "
        "(seeded by the experiment seed) from the documents; the whole corpus if smaller")
    sample_documents: int | None = Field(
        None, ge=1, description="also stop at this many documents, drawn the same way (the "
        "budget reached first wins); null: sample_bytes alone sets the sample")
    lowercase: bool = Field(
        True, description="wordpiece: lower-case the text (BERT uncased); false for cased")
    strip_accents: bool | None = Field(
        None, description="wordpiece: remove accents; null = follow `lowercase` (as BERT)")
    add_prefix_space: bool = Field(
        False, description="bpe: treat a text's first word like one after a space, so "
        "'Hello' and ' Hello' tokenize alike (GPT-2: false)")
