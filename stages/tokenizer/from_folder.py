"""`tokenizer.from`: reuse a pretrained model's tokenizer instead of training one, so that
token ids mean what the model's embeddings learned (continued pretraining with
`pretrain.init_from`).

    tokenizer, special_tokens = read_folder_tokenizer(Path("ckpt/minilm"))

A folder's tokenizer.json is taken as it is. Without one, a BERT-style vocab.txt (one
WordPiece token a line, as MiniLM and bert-base-uncased ship it) is assembled with the
parts of the wordpiece recipe, lower-casing as tokenizer_config.json says. Special
tokens come by role from special_tokens_map.json (or tokenizer_config.json), else from
their usual spellings, as the dataset stage looks them up.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

_ROLES = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")
_USUAL_SPELLINGS = {"eos_token": ("<|endoftext|>", "</s>"), "bos_token": ("<|endoftext|>", "<s>"),
                    "unk_token": ("[UNK]", "<unk>"), "sep_token": ("[SEP]",), "pad_token": ("[PAD]", "<pad>"),
                    "cls_token": ("[CLS]",), "mask_token": ("[MASK]",)}


def read_folder_tokenizer(folder: Path) -> tuple[Tokenizer, dict[str, Any]]:
    """(tokenizer, role -> token) of a model folder."""
    settings = _read_json(folder / "tokenizer_config.json")
    if (folder / "tokenizer.json").is_file():
        tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    elif (folder / "vocab.txt").is_file():
        tokenizer = wordpiece_from_vocab(folder / "vocab.txt", settings)
    else:
        raise FileNotFoundError(
            f"tokenizer.from={folder}: neither tokenizer.json nor vocab.txt is there; save the model's "
            "tokenizer as tokenizer.json (transformers: AutoTokenizer.from_pretrained(folder)"
            ".save_pretrained(folder))")
    # A model's tokenizer.json may pad or truncate to the model's length (MiniLM's pads
    # to 128); the dataset stage packs documents itself and must see every token.
    tokenizer.no_padding()
    tokenizer.no_truncation()
    return tokenizer, special_tokens_of(folder, tokenizer, settings)


def special_tokens_of(folder: Path, tokenizer: Tokenizer, settings: dict[str, Any]) -> dict[str, Any]:
    """Role -> token, for the roles whose token is in the vocabulary."""
    declared = {**settings, **_read_json(folder / "special_tokens_map.json")}
    roles: dict[str, Any] = {}
    for role in _ROLES:
        candidates = [_content(declared.get(role))] + list(_USUAL_SPELLINGS[role])
        token = next((t for t in candidates if t and tokenizer.token_to_id(t) is not None), None)
        if token is not None:
            roles[role] = token
    extra = [_content(t) for t in declared.get("additional_special_tokens") or []]
    if extra:
        roles["additional_special_tokens"] = [t for t in extra if t and tokenizer.token_to_id(t) is not None]
    return roles


def wordpiece_from_vocab(vocab_file: Path, settings: dict[str, Any]) -> Tokenizer:
    """BERT's tokenizer from its vocab.txt (the ids are the line numbers)."""
    vocab = {}
    for line in vocab_file.read_text(encoding="utf-8").splitlines():
        vocab.setdefault(line.rstrip("\r"), len(vocab))
    unk, cls, sep = (_content(settings.get(role)) or default for role, default in
                     (("unk_token", "[UNK]"), ("cls_token", "[CLS]"), ("sep_token", "[SEP]")))
    missing = [token for token in (unk, cls, sep) if token not in vocab]
    if missing:
        raise ValueError(f"{vocab_file}: has no {', '.join(missing)} line; a BERT vocabulary needs "
                         "[UNK], [CLS] and [SEP] (or tokenizer_config.json naming its own)")
    lowercase = settings.get("do_lower_case", True)
    tokenizer = Tokenizer(models.WordPiece(vocab, unk_token=unk, continuing_subword_prefix="##"))
    tokenizer.normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=settings.get("tokenize_chinese_chars", True),
        strip_accents=settings.get("strip_accents"), lowercase=lowercase)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{cls}:0 $A:0 {sep}:0", pair=f"{cls}:0 $A:0 {sep}:0 $B:1 {sep}:1",
        special_tokens=[(cls, vocab[cls]), (sep, vocab[sep])])
    tokenizer.decoder = decoders.WordPiece(prefix="##")
    specials = [_content(settings.get(role)) or default for role, default in
                (("pad_token", "[PAD]"), ("unk_token", "[UNK]"), ("cls_token", "[CLS]"), ("sep_token", "[SEP]"),
                 ("mask_token", "[MASK]"))]
    tokenizer.add_special_tokens([token for token in specials if token in vocab])  # never split, keep their ids
    return tokenizer


def _content(token: Any) -> str | None:
    """A special token as special_tokens_map.json writes it: a string or {"content": ...}."""
    return token.get("content") if isinstance(token, dict) else token


def _read_json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
