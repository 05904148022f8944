"""A finished tokenizer output as the later stages read it: its file names, the role of
each special token, and the token ids an objective needs.

Roles come from special_tokens_map.json (Hugging Face names: eos_token, pad_token,
cls_token, ...); a role the map lacks falls back to the token's usual spelling in the
vocabulary ([CLS], </s>, ...), so tokenizers made elsewhere work too. Sentinels are
<extra_id_0>, <extra_id_1>, ... for as long as the vocabulary has them.

The tokenizer stage checks with `resolve_token_ids` that a tokenizer.from folder serves
the objective; the dataset stage resolves the ids it writes examples with.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer

from stages.data.masking import word_start_table

TOKENIZER_FILE = "tokenizer.json"
SPECIAL_TOKENS_FILE = "special_tokens_map.json"


@dataclass(frozen=True)
class TokenIds:
    """The ids an objective needs, resolved from the tokenizer's special-token roles."""
    vocab_size: int
    eos: int | None = None
    pad: int | None = None
    cls: int | None = None
    sep: int | None = None
    mask: int | None = None
    special: tuple[int, ...] = ()
    sentinels: tuple[int, ...] = ()   # <extra_id_0>, <extra_id_1>, ... in order
    continuation: tuple[int, ...] = field(default=(), repr=False)  # ids that do not start a word


def load_special_tokens(tokenizer_dir: str | os.PathLike) -> dict[str, str]:
    """Role -> token of a finished tokenizer output (eos_token, pad_token, ...)."""
    return json.loads((Path(tokenizer_dir) / SPECIAL_TOKENS_FILE).read_text(encoding="utf-8"))


_USUAL = {"eos": ("eos_token", ["<|endoftext|>", "</s>", "[SEP]"]),
          "pad": ("pad_token", ["<|pad|>", "<pad>", "[PAD]"]),
          "cls": ("cls_token", ["[CLS]", "<s>"]),
          "sep": ("sep_token", ["[SEP]", "</s>"]),
          "mask": ("mask_token", ["[MASK]", "<mask>"])}
_NEEDS = {"clm": ("eos",), "span": ("eos", "pad"), "mlm": ("cls", "sep", "mask", "pad")}


def resolve_token_ids(tokenizer_dir: Path, objective: str) -> TokenIds:
    tokenizer = Tokenizer.from_file(str(tokenizer_dir / TOKENIZER_FILE))
    roles = (load_special_tokens(tokenizer_dir)
             if (tokenizer_dir / SPECIAL_TOKENS_FILE).is_file() else {})
    found = {}
    for name, (role, spellings) in _USUAL.items():
        candidates = ([roles[role]] if isinstance(roles.get(role), str) else []) + spellings
        found[name] = next((tokenizer.token_to_id(t) for t in candidates
                            if tokenizer.token_to_id(t) is not None), None)
    missing = [name for name in _NEEDS[objective] if found[name] is None]
    if missing:
        hint = {"mlm": "tokenizer.kind: wordpiece (the BERT recipe)",
                "span": "tokenizer.kind: unigram (the T5 recipe)",
                "clm": "tokenizer.kind: bpe"}[objective]
        raise ValueError(
            f"dataset.objective: {objective} needs the special tokens "
            f"{', '.join(_NEEDS[objective])}, but {tokenizer_dir / TOKENIZER_FILE} has no "
            f"{', '.join(missing)} token; use {hint}")
    sentinels = []
    while (token_id := tokenizer.token_to_id(f"<extra_id_{len(sentinels)}>")) is not None:
        sentinels.append(token_id)
    vocabulary = tokenizer.get_vocab(with_added_tokens=True)
    special = sorted({token_id for token_id in found.values() if token_id is not None}
                     | {t.content and tokenizer.token_to_id(t.content)
                        for t in tokenizer.get_added_tokens_decoder().values() if t.special}
                     | set(sentinels))
    continuation = ()
    if objective == "mlm":
        continuation = tuple(int(i) for i in np.flatnonzero(~word_start_table(vocabulary)))
    return TokenIds(vocab_size=tokenizer.get_vocab_size(), eos=found["eos"], pad=found["pad"],
                    cls=found["cls"], sep=found["sep"], mask=found["mask"],
                    special=tuple(int(i) for i in special), sentinels=tuple(sentinels),
                    continuation=continuation)
