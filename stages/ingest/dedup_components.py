"""Step 3 of the distributed dedup with `minhash_clustering: components`: datatrove's
clustering, in two task rounds between the partition step and the keep masks.

a. One task per staged file verifies its near candidate pairs against the MinHash
   signatures (dedup_keep.verified_pairs, the check the `pairs` rule uses) and writes the
   verified ones: dedup/verified-FFFFF.npy, (file, row, parent_file, parent_row).
b. One task reads every file's verified pairs, finds the connected components
   (scipy.sparse.csgraph over the documents that are on a pair) and writes every
   document but the first of its component: dedup/component-drops.npy, (file, row),
   sorted, so each keep-mask task reads its slice with two binary searches.

Task b holds the verified pairs of the whole corpus, as datatrove's single clustering
task does: its memory follows the number of near-duplicate pairs, not of documents. The
driver holds nothing per document either way. The documents kept are those of the
single-driver path with the same setting (lsh.near_duplicate_masks), first in corpus order.
"""

from __future__ import annotations

import os

import numpy as np

from stages.ingest.dedup_partitions import DROP_ENTRY, PAIR_ENTRY, read_file_list
from stages.ingest.lsh import not_first_of_component

COMPONENT_DROPS = "component-drops.npy"


def verified_pairs_path(dedup_dir: str, file_index: int) -> str:
    return os.path.join(dedup_dir, f"verified-{file_index:05d}.npy")


def component_drops_path(dedup_dir: str) -> str:
    return os.path.join(dedup_dir, COMPONENT_DROPS)


def write_component_drops(dedup_dir: str) -> int:
    """Task b: the documents every component drops; returns how many."""
    num_files = len(read_file_list(dedup_dir))
    pairs = np.concatenate([np.load(verified_pairs_path(dedup_dir, i)) for i in range(num_files)]
                           or [np.zeros(0, dtype=PAIR_ENTRY)])
    # (file, row) as one integer whose order is corpus order: rows are below 2**32.
    child = (pairs["file"].astype(np.int64) << 32) | pairs["row"]
    parent = (pairs["parent_file"].astype(np.int64) << 32) | pairs["parent_row"]
    dropped = not_first_of_component(np.stack([child, parent], axis=1))
    out = np.empty(len(dropped), dtype=DROP_ENTRY)
    out["file"], out["row"] = dropped >> 32, dropped & 0xFFFFFFFF
    np.save(component_drops_path(dedup_dir), out)  # sorted by (file, row), as dropped is
    return len(out)
