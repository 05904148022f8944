"""Near-duplicate detection: MinHash signatures of word n-gram shingles, LSH bands.

Signatures are computed in the per-file tasks, vectorised with numpy over shingles and
permutations at once (in chunks, so a 50 MB document needs no 10 GB matrix): permutation
i maps a 32-bit shingle hash h to (a_i * h + b_i) mod p, p = 2^32 + 15 (prime), and the
signature keeps the minimum per permutation. a_i, b_i come from a fixed seed: the same
text has the same signature on every machine and run.

The dedup (dedup_run.py: partition tasks bucket the band keys, per-file tasks verify;
lsh.py is the single-driver reference) finds documents that share a band hash with an
earlier one and whose estimated Jaccard similarity (fraction of equal signature entries)
reaches the threshold: near-duplicates. First occurrence wins, as for exact dedup.
"""

from __future__ import annotations

import zlib

import numpy as np

_PRIME = np.uint64((1 << 32) + 15)
_SEED = 0x5EED
_CHUNK_SHINGLES = 4096  # shingles x permutations per step: 4096 x 128 x 8 B = 4 MB


def permutations(num_permutations: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(_SEED)
    a = rng.integers(1, 1 << 32, size=num_permutations, dtype=np.uint64)
    b = rng.integers(0, 1 << 32, size=num_permutations, dtype=np.uint64)
    return a, b


def shingle_hashes(text: str, ngram: int) -> np.ndarray:
    """uint64 array of 32-bit hashes of the distinct word n-grams (the whole text as one
    shingle if it has fewer words). Lower-cased: case differences do not hide a copy."""
    words = text.lower().split()
    if not words:
        return np.zeros(1, dtype=np.uint64)
    word_hashes = np.fromiter((zlib.crc32(w.encode("utf-8", "surrogatepass")) for w in words),
                              dtype=np.uint64, count=len(words))
    count = max(len(words) - ngram + 1, 1)
    combined = np.zeros(count, dtype=np.uint64)
    for k in range(min(ngram, len(words))):  # polynomial hash of each window, mod 2^64
        combined = combined * np.uint64(1_000_003) + word_hashes[k:k + count]
    return np.unique((combined ^ (combined >> np.uint64(32))) & np.uint64(0xFFFFFFFF))


def signature(text: str, ngram: int, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """uint32[num_permutations] MinHash signature of the text's shingles."""
    hashes = shingle_hashes(text, ngram)
    result = np.full(len(a), np.iinfo(np.uint64).max, dtype=np.uint64)
    for start in range(0, len(hashes), _CHUNK_SHINGLES):
        chunk = hashes[start:start + _CHUNK_SHINGLES, None]            # (S, 1)
        np.minimum(result, ((chunk * a + b) % _PRIME).min(axis=0), out=result)  # (P,)
    return result.astype(np.uint32)  # values < p fit 33 bits; the low 32 keep the order info


def band_keys(signatures: np.ndarray, num_bands: int) -> np.ndarray:
    """(N, P) uint32 -> (N, num_bands) uint64: a hash of each band's rows."""
    n, p = signatures.shape
    rows = signatures.reshape(n, num_bands, p // num_bands).astype(np.uint64)
    weights = np.uint64(0x9E3779B97F4A7C15) ** np.arange(1, p // num_bands + 1, dtype=np.uint64)
    return (rows * weights).sum(axis=2, dtype=np.uint64) + np.arange(num_bands, dtype=np.uint64)
