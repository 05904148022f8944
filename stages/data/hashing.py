"""Seeded, platform-independent hashing of strings to [0, 1).

Python's built-in `hash()` is salted per process, so any decision that must agree across
processes, machines and reruns (which documents go to validation, which ones the
tokenizer trains on) goes through this instead.
"""

from __future__ import annotations

import hashlib

_UNIT = float(2**64)


def unit_hash(key: str, seed: int, salt: str = "") -> float:
    """A uniform-looking number in [0, 1) fixed by (key, seed, salt).

    `salt` separates independent uses of the same seed (e.g. "split" and "tokenizer
    sample"), so that the validation documents are not also the tokenizer's held-out set.
    """
    digest = hashlib.blake2b(f"{salt}\x00{seed}\x00{key}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") / _UNIT
