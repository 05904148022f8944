"""dataset.mixture: which ingested documents each part of a data mixture takes, and the
index that ties the parts' datasets together.

A part names its documents by the file they came from (the ingest `source` column), the
way ingest.sources[].path named the files: the file itself, a folder above it, or a glob.
Every document of a file shares its source, so parts are assigned file by file, first
matching part first; the driver reads only the `source` column of the ingest shards to
do so, one record batch at a time. Each part is then built like a whole dataset, from
only its ingest shards and only its files, into `<output_dir>/<name>/`.

Output (the top-level index.json is a dataset of its own, every part's shards together,
so a reader that knows nothing of mixtures still opens it):

    output_dir/index.json            splits over every part's shards, plus
                                     "mixture": [{"name", "weight", "path"}, ...]
    output_dir/<name>/index.json     the part alone: a dataset like any other
    output_dir/<name>/train/shard-00003.arrow ...   shard i packs ingest shard i (only the
                                     ingest shards that hold the part's files)
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq

from stages.data.packed import SPLITS
from stages.dataset.config import MixturePart

_LISTED_SOURCES = 10  # in an error, the first few sources the ingest output does hold


@dataclass(frozen=True)
class PartPlan:
    name: str
    weight: float
    sources: frozenset[str]         # the ingest `source` values (files) of its documents
    shards: tuple[tuple[int, Path], ...]  # (ingest shard index, path) holding any of them


def source_matches(source: str, pattern: str) -> bool:
    """Whether a document from file `source` belongs to `pattern`: the same path, a folder
    above it, or a glob whose * ? [] stay within a folder and ** spans folders."""
    pattern = pattern.rstrip("/")
    if source == pattern or source.startswith(pattern + "/"):
        return True
    return _glob_match(source.split("/"), pattern.split("/"))


def _glob_match(parts: list[str], pattern: list[str]) -> bool:
    if not pattern:
        return not parts
    if pattern[0] == "**":
        return any(_glob_match(parts[skip:], pattern[1:]) for skip in range(len(parts) + 1))
    return bool(parts) and fnmatch.fnmatchcase(parts[0], pattern[0]) and _glob_match(parts[1:], pattern[1:])


def plan_mixture(parts: list[MixturePart], ingest_shards: list[Path]) -> tuple[list[PartPlan], list[str]]:
    """Each part's files and shards, and the files no part takes (their documents are left
    out of the dataset). A part that matches no file is an error naming its key."""
    shard_sources = [_distinct_sources(shard) for shard in ingest_shards]
    every_source = sorted(set().union(*shard_sources))
    owner = {source: _first_part(source, parts) for source in every_source}
    plans = []
    for index, part in enumerate(parts):
        sources = frozenset(s for s, owner_index in owner.items() if owner_index == index)
        if not sources:
            raise ValueError(_no_match_message(index, part, parts, every_source))
        shards = tuple((i, shard) for i, shard in enumerate(ingest_shards) if sources & shard_sources[i])
        plans.append(PartPlan(part.name, part.weight, sources, shards))
    unmatched = [source for source in every_source if owner[source] is None]
    return plans, unmatched


def _first_part(source: str, parts: list[MixturePart]) -> int | None:
    return next((i for i, part in enumerate(parts) if source_matches(source, part.source)), None)


def _distinct_sources(shard: Path) -> set[str]:
    found: set[str] = set()
    for batch in pq.ParquetFile(shard).iter_batches(columns=["source"]):
        found.update(batch.column(0).unique().to_pylist())
    return found


def _no_match_message(index: int, part: MixturePart, parts: list[MixturePart],
                      every_source: list[str]) -> str:
    listed = ", ".join(every_source[:_LISTED_SOURCES])
    more = f" and {len(every_source) - _LISTED_SOURCES} more" if len(every_source) > _LISTED_SOURCES else ""
    taken = [i for i, other in enumerate(parts[:index])
             if any(source_matches(s, part.source) and source_matches(s, other.source)
                    for s in every_source)]
    earlier = (f" (the files it matches all went to the earlier part(s) "
               f"{', '.join(parts[i].name for i in taken)}: a file goes to the first part that "
               f"matches it)") if taken else ""
    return (f"dataset.mixture[{index}].source = {part.source!r} (part {part.name!r}) matches no "
            f"ingested document{earlier}; the ingest output holds documents from {listed}{more}. "
            f"Give a file, folder or glob as ingest.sources[].path names it, relative to data_dir")


def mixture_index(parts: list[PartPlan], part_indexes: list[dict]) -> dict:
    """The top-level index.json: the parts' common settings (objective, seq_len, token ids,
    masking), their shards together as one dataset, and the mixture itself."""
    first = part_indexes[0]
    index = {key: value for key, value in first.items() if key not in ("splits", "stats")}
    index["splits"] = {}
    for split in SPLITS:
        shards = [{**shard, "path": f"{part.name}/{shard['path']}"}
                  for part, part_index in zip(parts, part_indexes, strict=True)
                  for shard in part_index["splits"][split]["shards"]]
        index["splits"][split] = {"shards": shards, "rows": sum(s["rows"] for s in shards),
                                  "tokens": sum(s["tokens"] for s in shards)}
    index["mixture"] = [{"name": part.name, "weight": part.weight, "path": part.name} for part in parts]
    return index
