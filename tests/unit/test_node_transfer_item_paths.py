"""The paths inside a task's work item: found wherever the item keeps them, and moved
without changing the item's types or touching what lies outside the roots."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from stages.tracking import MetricsLog
from storage.node_transfer.item_paths import paths_under, relocate


class Piece(NamedTuple):
    path: str
    rows: int


@dataclass(frozen=True)
class Job:
    output_dir: Path
    pieces: tuple[Piece, ...]
    options: dict
    metrics_log: MetricsLog
    source: str


def a_job(root: Path, tmp_path: Path) -> Job:
    return Job(output_dir=root / "dataset/fp",
               pieces=(Piece(str(root / "ingest/fp/staging/file-0.parquet"), 3),),
               options={"tokenizer": root / "tokenizer/fp/tokenizer.json", "seed": 0},
               metrics_log=MetricsLog(root / "dataset/fp/metrics.jsonl"),
               source=str(tmp_path / "corpus/book.txt"))


def test_every_path_under_the_root_is_found_in_fields_tuples_dicts_and_our_objects(tmp_path):
    root = tmp_path / "mirror"
    job = a_job(root, tmp_path)
    assert paths_under(job, root) == {
        root / "dataset/fp", root / "ingest/fp/staging/file-0.parquet",
        root / "tokenizer/fp/tokenizer.json", root / "dataset/fp/metrics.jsonl"}
    assert paths_under(job, tmp_path / "mirr") == set()  # a prefix of a name is not a parent


def test_relocation_keeps_types_moves_by_the_first_matching_root_and_leaves_the_rest(tmp_path):
    root, node, private = tmp_path / "mirror", tmp_path / "node", tmp_path / "private"
    job = a_job(root, tmp_path)
    moved = relocate(job, [(root / "dataset/fp", private / "dataset/fp"), (root, node)])
    assert moved.output_dir == private / "dataset/fp" and isinstance(moved.output_dir, Path)
    assert moved.pieces == (Piece(str(node / "ingest/fp/staging/file-0.parquet"), 3),)
    assert isinstance(moved.pieces[0], Piece) and isinstance(moved.pieces[0].path, str)
    assert moved.options == {"tokenizer": node / "tokenizer/fp/tokenizer.json", "seed": 0}
    assert moved.metrics_log.path == private / "dataset/fp/metrics.jsonl"
    assert moved.source == job.source  # outside the mirror: as it was
    # The original is untouched, and moving back gives it again.
    assert job.metrics_log.path == root / "dataset/fp/metrics.jsonl"
    back = relocate(moved, [(private / "dataset/fp", root / "dataset/fp"), (node, root)])
    assert back.output_dir == job.output_dir and back.pieces == job.pieces
    assert back.options == job.options and back.metrics_log.path == job.metrics_log.path
    assert relocate(job, [(tmp_path / "elsewhere", node)]) is job  # nothing to move: the same object

