"""Token ids -> text as they arrive, for printing while decoding runs.

A token can end in the middle of a character (byte-level BPE splits UTF-8 bytes), and
some decoders tidy spaces once the next token is known; so the text is decoded from all
ids so far and only what is new is handed out, holding back a trailing partial character
(U+FFFD) until the bytes that complete it arrive.
"""

from __future__ import annotations

import os

from tokenizers import Tokenizer

REPLACEMENT = "\ufffd"


class TextStream:
    def __init__(self, tokenizer: Tokenizer, skip_special_tokens: bool = True):
        self.tokenizer = tokenizer
        self.skip_special_tokens = skip_special_tokens
        self.ids: list[int] = []
        self.shown = ""

    def push(self, token_id: int) -> str:
        """The text that `token_id` adds (may be "" while a character is incomplete)."""
        self.ids.append(token_id)
        text = self.tokenizer.decode(self.ids, skip_special_tokens=self.skip_special_tokens)
        if text.endswith(REPLACEMENT):
            return ""
        return self._advance(text)

    def finish(self) -> str:
        """Whatever is still held back (a character whose bytes never completed)."""
        return self._advance(self.tokenizer.decode(self.ids, skip_special_tokens=self.skip_special_tokens))

    def _advance(self, text: str) -> str:
        if text.startswith(self.shown):
            added = text[len(self.shown):]
        else:  # a decoder rewrote shown text ("word ." -> "word."): go on from where they differ
            added = text[len(os.path.commonprefix([self.shown, text])):]
        self.shown = text
        return added
