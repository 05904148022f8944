"""Near-duplicate removal over the whole corpus: LSH candidates, then MinHash verification,
vectorized with numpy (a sort per band, no Python loop per document).

This is the single-driver path, which holds bytes per document in the driver. Ingest now
runs the same rule as a hash-partitioned shuffle of tasks (dedup_run.py); this module
stays as the reference that the distributed dedup is tested against
(tests/unit/test_dedup_distributed.py) and measured against
(benchmarks/ingest_dedup_scale.py).

Rule: a document is a near-duplicate when it shares an LSH band with an earlier document
(corpus order) and their signatures agree on at least `threshold` of the permutations
(the estimated Jaccard similarity of their shingles). Per band, each document is compared
with the first document of its band bucket; first occurrence wins, as for exact dedup.
With `minhash_clustering: components`, the verified pairs are edges of a graph instead,
and each connected component keeps only its first document (datatrove's clustering).

Memory in the driver stays small and flat per document: the per-file tasks wrote each
file's band keys band-major (num_bands x docs, uint64) and its signatures to staging, and
the driver holds one band of keys for the corpus at a time (8 bytes per document, plus
the sort) and reads signatures only for the candidate pairs. (A dict from band key to
document, the obvious way, cost ~150 bytes x documents x bands: 0.8 GB at 110 MB of
Gutenberg, growing with the corpus.)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from stages.ingest.staging import CleanedFile

_VERIFY_PAIRS = 65_536  # candidate pairs verified per step: 64 Ki x 2 x 128 x 4 B = 64 MB max


def near_duplicate_masks(files: list[CleanedFile], masks: list[np.ndarray], num_bands: int,
                         threshold: float, clustering: str = "pairs") -> list[np.ndarray]:
    """Narrow `masks` (exact-dedup survivors per file) to drop near-duplicates: the later
    document of each verified pair (`clustering="pairs"`), or every document of a
    connected component of the verified pairs but its first ("components")."""
    counts = np.array([int(mask.sum()) for mask in masks], dtype=np.int64)
    if counts.sum() == 0:
        return [mask.copy() for mask in masks]
    children, parents = _candidate_pairs(files, masks, num_bands)
    # Documents are numbered 0..N-1 in corpus order over the survivors of every file.
    file_of = np.repeat(np.arange(len(files)), counts)
    row_of = np.concatenate([np.flatnonzero(mask) for mask in masks])
    verified = []
    for start in range(0, len(children), _VERIFY_PAIRS):
        child, parent = children[start:start + _VERIFY_PAIRS], parents[start:start + _VERIFY_PAIRS]
        ends, index = np.unique(np.concatenate([child, parent]), return_inverse=True)
        signatures = _signatures(files, file_of[ends], row_of[ends])
        agreement = (signatures[index[:len(child)]] == signatures[index[len(child):]]).mean(axis=1)
        similar = agreement >= threshold
        verified.append(np.stack([child[similar], parent[similar]], axis=1))
    pairs = np.concatenate(verified) if verified else np.zeros((0, 2), dtype=np.int64)
    drop = np.zeros(int(counts.sum()), dtype=bool)
    if clustering == "components":
        drop[not_first_of_component(pairs)] = True
    else:
        drop[pairs[:, 0]] = True
    narrowed, offset = [], 0
    for mask, count in zip(masks, counts.tolist(), strict=True):
        keep = mask.copy()
        keep[np.flatnonzero(mask)[drop[offset:offset + count]]] = False
        narrowed.append(keep)
        offset += count
    return narrowed


def not_first_of_component(pairs: np.ndarray) -> np.ndarray:
    """The documents of the graph whose edges are `pairs` (n x 2 document numbers, in
    corpus order) that are not the first (smallest) of their connected component: what
    datatrove's clustering step drops. Sorted. Only documents on an edge are nodes, so
    memory follows the number of pairs, not of documents."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    if len(pairs) == 0:
        return np.zeros(0, dtype=np.int64)
    nodes, ends = np.unique(pairs, return_inverse=True)  # sorted: node i is the i-th smallest
    ends = ends.reshape(pairs.shape)
    graph = coo_matrix((np.ones(len(ends), dtype=np.int8), (ends[:, 0], ends[:, 1])),
                       shape=(len(nodes), len(nodes)))
    _, labels = connected_components(graph, directed=False)
    first = np.full(labels.max() + 1, len(nodes))
    np.minimum.at(first, labels, np.arange(len(nodes)))
    return nodes[np.arange(len(nodes)) != first[labels]].astype(np.int64)


def _candidate_pairs(files: list[CleanedFile], masks: list[np.ndarray],
                     num_bands: int) -> tuple[np.ndarray, np.ndarray]:
    """(child, parent) document numbers, parent < child, distinct: per band, every document
    of a bucket with the bucket's first document."""
    pairs = []
    for band in range(num_bands):
        keys = np.concatenate([_band(f, band)[mask] for f, mask in
                               zip(files, masks, strict=True)])
        order = np.argsort(keys, kind="stable")  # stable: a bucket lists documents in order
        sorted_keys = keys[order]
        opens = np.empty(len(keys), dtype=bool)
        opens[0] = True
        np.not_equal(sorted_keys[1:], sorted_keys[:-1], out=opens[1:])
        first = order[opens][np.cumsum(opens) - 1]  # each position's bucket's first document
        later = ~opens
        pairs.append(np.stack([order[later], first[later]], axis=1))
    unique = np.unique(np.concatenate(pairs), axis=0)  # sorted by child: deterministic
    return unique[:, 0], unique[:, 1]


def _band(file: CleanedFile, band: int) -> np.ndarray:
    """One band's keys of a staged file: one contiguous row of its band-major array, read
    through a short-lived memory map, so only that row's pages are touched."""
    if file.num_documents == 0:
        return np.zeros(0, dtype=np.uint64)
    return np.array(np.load(file.bands_path, mmap_mode="r")[band])


def _signatures(files: list[CleanedFile], file_of: np.ndarray, row_of: np.ndarray) -> np.ndarray:
    """Signature rows of the given documents (file, row), in the given order."""
    out = None
    for file_index in np.unique(file_of).tolist():
        selected = np.flatnonzero(file_of == file_index)
        rows = np.load(files[file_index].signatures_path, mmap_mode="r")[row_of[selected]]
        if out is None:
            out = np.empty((len(file_of), rows.shape[1]), dtype=rows.dtype)
        out[selected] = rows
    return out
