"""The distributed dedup (dedup_run.py) keeps exactly the documents of the single-driver
path, and writes the same shard bytes, on real books with planted exact and near
duplicates, whatever the number of partitions (in this process, no Ray); under either
near-dedup clustering (a verified pair drops its later document, or each connected
component of pairs keeps its first), which differ on a chain of partial overlaps."""

from __future__ import annotations

import random

import numpy as np
import pytest

from stages.ingest.config import IngestConfig
from stages.ingest.dedup_partitions import partition_count
from tests.support.dedup_reference import distributed, single_driver

BOOKS = ["pg7700.txt", "pg1250.txt", "The-Dunwich-Horror.txt", "pg851.txt"]  # gpt-tiny's


def paragraphs(text: str) -> list[str]:
    return [p for p in text.split("\n\n") if len(p.split()) >= 30]


def plant_duplicates(data_dir, target) -> None:
    """The books, plus two files of planted copies: one sorted before the books (its
    copies come first in corpus order, so the books' originals become the duplicates)
    and one after. Copies are exact, one word changed (near), or half rewritten (kept)."""
    books = target / "books"
    books.mkdir(parents=True)
    planted: dict[str, list[str]] = {"0-first.txt": [], "z-last.txt": []}
    for index, name in enumerate(BOOKS):
        text = (data_dir / "corpus/gutenberg" / name).read_text(encoding="utf-8-sig")
        (books / name).write_text(text, encoding="utf-8")
        for k, paragraph in enumerate(paragraphs(text)[index::7][:12]):
            words = paragraph.split()
            near = words[:len(words) // 2] + ["planted"] + words[len(words) // 2 + 1:]
            far = words[: len(words) // 2] + [f"other{i}" for i in range(len(words) // 2)]
            copies = (paragraph, " ".join(near), " ".join(far))
            planted["0-first.txt" if k % 2 else "z-last.txt"].extend(copies)
            planted["z-last.txt" if k % 3 else "0-first.txt"].append(" ".join(near))
    for name, texts in planted.items():
        (books / name).write_text("\n\n".join(texts) + "\n", encoding="utf-8")


@pytest.fixture(scope="module")
def corpus(data_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("dedup-corpus")
    plant_duplicates(data_dir, root)
    return root


@pytest.mark.parametrize("dedup, clustering", [("near", "pairs"), ("near", "components"),
                                               ("exact", "pairs"), ("none", "pairs")])
def test_kept_documents_and_shards_match_the_single_driver_path(corpus, tmp_path, dedup, clustering):
    config = IngestConfig(sources=[{"path": "books/*.txt"}], dedup=dedup, num_shards=5,
                          minhash_clustering=clustering)
    masks, shards = single_driver(config, corpus, tmp_path / "reference")
    exact_masks, _ = single_driver(config.model_copy(update={"dedup": "exact"}), corpus,
                                   tmp_path / "exact")
    for partitions in (1, 3, 64):
        got, got_shards, kept = distributed(config, corpus, tmp_path / f"p{partitions}",
                                            partitions)
        assert [m.tolist() for m in got] == [m.tolist() for m in masks], partitions
        assert got_shards == shards, partitions
        assert [k.documents_out for k in kept] == [int(m.sum()) for m in masks]
        if dedup == "near":  # the planted copies are found, the rewritten ones kept
            near = sum(k.near_duplicate[0] for k in kept)
            exact = sum(k.exact_duplicate[0] for k in kept)
            assert near >= 48 and exact >= 48, (near, exact)
            assert near == sum(int((e & ~m).sum()) for e, m in zip(exact_masks, masks))


def test_components_drop_a_document_only_chained_to_the_first_and_pairs_keep_it(tmp_path):
    """Three documents in corpus order: A and B each add 20 words of their own to one
    120-word core, C is the core alone. C is near A and near B (estimated Jaccard 0.85 and
    0.88, threshold 0.8), A and B are not near each other (0.75). pairs drops C only;
    components ({A, B, C} through C) keep A alone, as datatrove would. Both paths agree."""
    rng = random.Random(7)
    words = [f"w{i}" for i in range(100_000)]
    core, own_a, own_b = ([rng.choice(words) for _ in range(n)] for n in (120, 20, 20))
    texts = [" ".join(own_a + core), " ".join(core + own_b), " ".join(core)]
    (tmp_path / "chain.txt").write_text("\n\n".join(texts) + "\n", encoding="utf-8")
    expected = {"pairs": [True, True, False], "components": [True, False, False]}
    for clustering, keep in expected.items():
        config = IngestConfig(sources=[{"path": "chain.txt"}], dedup="near", num_shards=1,
                              minhash_clustering=clustering)
        masks, _ = single_driver(config, tmp_path, tmp_path / f"single-{clustering}")
        got, _, kept = distributed(config, tmp_path, tmp_path / f"distributed-{clustering}", 2)
        assert [m.tolist() for m in masks] == [m.tolist() for m in got] == [keep], clustering
        assert kept[0].near_duplicate[0] == keep.count(False)


def test_more_partitions_than_documents_and_empty_files(tmp_path):
    """100 partitions for 80 entries: most partitions hold nothing. A file with no
    documents takes part all the same."""
    data = tmp_path / "data"
    data.mkdir()
    text = "the same paragraph of words repeated here for a test of dedup"
    (data / "a.txt").write_text(f"{text}\n\n{text} again\n\n{text}\n", encoding="utf-8")
    (data / "b.txt").write_text("\n\n", encoding="utf-8")
    (data / "c.txt").write_text(f"{text}\n\nsomething else entirely, long enough\n",
                                encoding="utf-8")
    config = IngestConfig(sources=[{"path": "*.txt"}], dedup="near", num_shards=7)
    masks, shards = single_driver(config, data, tmp_path / "reference")
    got, got_shards, kept = distributed(config, data, tmp_path / "many", 100)
    assert [m.tolist() for m in got] == [m.tolist() for m in masks]
    assert [m.tolist() for m in got] == [[True, False, False], [], [False, True]]
    assert got_shards == shards
    assert [(k.exact_duplicate[0], k.near_duplicate[0]) for k in kept] == [(1, 1), (0, 0),
                                                                          (1, 0)]


def test_partition_count_bounds_the_entries_per_task():
    assert partition_count(0, None, 1) == 1
    assert partition_count(10, 16, 8) == 8  # at least one per CPU
    assert partition_count(10**9, 16, 2) == int(np.ceil(16 * 10**9 / (1 << 22)))
