"""Find a special token's id in a tokenizer saved beside the weights.

The pretrain stage's `model/` holds tokenizer.json but not the tokenizer stage's
special_tokens_map.json; the roles are found by their usual spellings (those of our
recipes and of Hugging Face's GPT-2, BERT and T5), after the map's entry when there is
a map beside the tokenizer.
"""

from __future__ import annotations

import json
from pathlib import Path

from tokenizers import Tokenizer

USUAL_SPELLINGS = {
    "eos_token": ("<|endoftext|>", "</s>", "[SEP]"),
    "pad_token": ("<|pad|>", "<pad>", "[PAD]"),
    "cls_token": ("[CLS]", "<s>"),
    "sep_token": ("[SEP]", "</s>"),
    "mask_token": ("[MASK]", "<mask>"),
}


def special_token_id(tokenizer: Tokenizer, role: str, tokenizer_path: Path, family: str) -> int:
    """The id of the `role` token (eos_token, pad_token, ...); an error naming the file
    and the spellings tried when the vocabulary has none."""
    candidates = list(USUAL_SPELLINGS[role])
    map_path = tokenizer_path.parent / "special_tokens_map.json"
    if map_path.is_file():
        mapped = json.loads(map_path.read_text()).get(role)
        if isinstance(mapped, str):
            candidates.insert(0, mapped)
    for token in candidates:
        token_id = tokenizer.token_to_id(token)
        if token_id is not None:
            return token_id
    raise ValueError(
        f"{tokenizer_path}: no {role} ({', '.join(candidates)}) in the vocabulary, and the "
        f"{family} scorer needs one; evaluate a model whose tokenizer was trained by the "
        "tokenizer stage with the recipe of its family (bpe: gpt, wordpiece: bert, unigram: t5)")


def sentinel_ids(tokenizer: Tokenizer) -> list[int]:
    """Ids of <extra_id_0>, <extra_id_1>, ... for as long as the vocabulary has them."""
    ids = []
    while (token_id := tokenizer.token_to_id(f"<extra_id_{len(ids)}>")) is not None:
        ids.append(token_id)
    return ids
