"""Vectorized corpus-wide dedup (stages/ingest/lsh.py, sharding.keep_masks) against a
plain-Python reading of the same rules, on real staged files (signatures and band keys
written as the per-file tasks write them)."""

from __future__ import annotations

import hashlib

import numpy as np

from stages.ingest.config import IngestConfig
from stages.ingest.lsh import near_duplicate_masks
from stages.ingest.minhash import band_keys, permutations, signature
from stages.ingest.sharding import keep_masks
from stages.ingest.staging import DIGEST_BYTES, CleanedFile, CleanJob, save_minhash
from stages.ingest.sources import SourceFile

BANDS, PERMUTATIONS, THRESHOLD = 16, 128, 0.8


def staged(tmp_path, texts: list[str], index: int) -> CleanedFile:
    """A staged file's dedup inputs, written as clean_file writes them."""
    config = IngestConfig(sources=[{"path": "x"}], dedup="near", minhash_bands=BANDS,
                          minhash_permutations=PERMUTATIONS)
    job = CleanJob(SourceFile("x", "x", "ingest.sources[0]", config.sources[0]),
                   str(tmp_path / f"file-{index}.parquet"), config)
    a, b = permutations(PERMUTATIONS)
    save_minhash(job, np.array([signature(t, 5, a, b) for t in texts],
                                dtype=np.uint32).reshape(len(texts), PERMUTATIONS))
    digests = b"".join(hashlib.blake2b(t.encode(), digest_size=DIGEST_BYTES).digest()
                       for t in texts)
    return CleanedFile(job.staging_path, "ingest.sources[0]", len(texts), 0, 0, {}, 0, 0, 0,
                       digests, np.ones(len(texts), dtype=np.int64), job.signatures_path,
                       job.bands_path)


def reference_near(files: list[CleanedFile], masks: list[np.ndarray]) -> list[np.ndarray]:
    """The documented rule, one document at a time: dropped when, in some band, the first
    earlier survivor of exact dedup with the same band key agrees on >= THRESHOLD."""
    documents = [(fi, row) for fi, mask in enumerate(masks) for row in np.flatnonzero(mask)]
    signatures = [np.load(f.signatures_path) for f in files]
    first_with_key: dict[tuple[int, int], tuple[int, int]] = {}
    keep = [mask.copy() for mask in masks]
    for fi, row in documents:
        own = signatures[fi][row]
        keys = band_keys(own[None, :], BANDS)[0]
        for band, key in enumerate(keys.tolist()):
            first = first_with_key.setdefault((band, key), (fi, row))
            if first != (fi, row) and np.mean(signatures[first[0]][first[1]] == own) >= THRESHOLD:
                keep[fi][row] = False
    return keep


def corpus(seed: int) -> list[list[str]]:
    """Three files of random-word documents; some exact copies, some one-word edits (near
    duplicates), some chains of edits drifting away from the original, across files."""
    rng = np.random.default_rng(seed)
    vocabulary = [f"w{i}" for i in range(300)]
    originals = [" ".join(rng.choice(vocabulary, 120)) for _ in range(60)]
    files: list[list[str]] = [[], [], []]
    for i, text in enumerate(originals):
        files[i % 3].append(text)
        words = text.split()
        if i % 4 == 0:
            files[(i + 1) % 3].append(text)  # exact duplicate
        if i % 3 == 0:
            edited = words[:60] + ["changed"] + words[61:]
            files[(i + 2) % 3].append(" ".join(edited))  # near duplicate
            files[(i + 2) % 3].append(" ".join(edited[:30] + ["again"] + edited[31:]))  # chain
        if i % 5 == 0:  # drift: each step one more word changed; far steps are not near
            for step in range(1, 7):
                words = words[:step * 17] + [f"drift{step}"] + words[step * 17 + 1:]
                files[step % 3].append(" ".join(words))
    return files


def test_near_dedup_matches_the_one_document_at_a_time_rule(tmp_path):
    for seed in range(3):
        (tmp_path / str(seed)).mkdir()
        files = [staged(tmp_path / str(seed), texts, i) for i, texts in enumerate(corpus(seed))]
        exact = keep_masks(files, dedup=True)
        near = near_duplicate_masks(files, exact, BANDS, THRESHOLD)
        expected = reference_near(files, exact)
        assert [m.tolist() for m in near] == [m.tolist() for m in expected]
        # Every edit of an original goes; of the drift chains, the steps far from the
        # first document of their buckets stay.
        assert 60 < sum(int(m.sum()) for m in near) < 60 + 12 * 6


def test_exact_dedup_keeps_first_occurrence_in_corpus_order(tmp_path):
    files = [staged(tmp_path, ["a b c", "d e f", "a b c"], 0),
             staged(tmp_path, ["d e f", "g h i"], 1), staged(tmp_path, [], 2)]
    assert [m.tolist() for m in keep_masks(files, dedup=True)] == [
        [True, True, False], [False, True], []]
    assert [m.tolist() for m in keep_masks(files, dedup=False)] == [
        [True, True, True], [True, True], []]
    assert [m.tolist() for m in near_duplicate_masks(
        files, keep_masks(files, dedup=True), BANDS, THRESHOLD)] == [
        [True, True, False], [False, True], []]


def test_not_first_of_component_keeps_the_smallest_document_of_each_component():
    from stages.ingest.lsh import not_first_of_component

    # 7~5, 7~3: one component {3, 5, 7}; 9~8 another; 12~11, 11~10 a chain.
    pairs = np.array([[7, 5], [7, 3], [9, 8], [12, 11], [11, 10]])
    assert not_first_of_component(pairs).tolist() == [5, 7, 9, 11, 12]
    assert not_first_of_component(np.zeros((0, 2), dtype=np.int64)).tolist() == []
