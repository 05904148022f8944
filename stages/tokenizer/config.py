"""Config of the tokenizer stage: which recipe, how big a vocabulary, how much text.

`kind` names a recipe (stages/tokenizer/recipes.py) that picks the parts Hugging Face
`tokenizers` composes: normalizer -> pre-tokenizer -> model (+ its trainer) ->
post-processor -> decoder, plus the special tokens and their roles. A new kind
is one new recipe function and one new value here.

Only pydantic here: the engine loads this module at startup to validate the YAML.
"""

from pathlib import Path
from typing import Literal

from pydantic import ConfigDict, Field, field_validator

from stages.section import Section


class TokenizerConfig(Section):
    """Train a subword tokenizer on a seeded sample of the ingested documents, or reuse a
    pretrained model's (`from`)."""

    # `from` is a Python keyword: the field is from_, the YAML key `from` (either is accepted,
    # so a dumped config validates again).
    model_config = ConfigDict(validate_by_name=True, validate_by_alias=True, serialize_by_alias=True)

    from_: str | None = Field(
        None, alias="from", description="reuse the tokenizer of this pretrained model folder "
        "(tokenizer.json, or vocab.txt for a BERT WordPiece) instead of training one, e.g. the "
        "folder of pretrain.init_from; its special tokens are mapped by role "
        "(special_tokens_map.json) and must include those dataset.objective needs. The other "
        "tokenizer keys are then unused; null = train")
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

    @field_validator("from_")
    @classmethod
    def _folder_exists(cls, path: str | None) -> str | None:
        if path is not None and not Path(path).expanduser().is_dir():
            raise ValueError(
                f"{path} is not a directory (a relative path is taken from the directory the "
                f"pipeline runs in, {Path.cwd()}); point it at a model folder with tokenizer.json "
                "or vocab.txt, or unset tokenizer.from")
        return path
