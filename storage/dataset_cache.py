"""A dataset on an fsspec URL (s3://, gs://, memory://, file://...) -> a local copy to
memory-map. Local paths are used as they are.

The copy lives in `<cache_dir>/<hash of the URL>/`, default
$PRETRAIN_DATA_CACHE or ~/.cache/pretrain-pipeline/datasets. index.json is fetched every
time (it is small, and it is how a rebuilt dataset is noticed); a shard is fetched only
when the cached file is missing or its size differs from the remote one. Files are
written under a temporary name and renamed, so ranks sharing a node and a cache may
fetch at the same time: the last rename wins and every rename holds complete bytes.
Only the requested split's shards are fetched.
"""

from __future__ import annotations

import hashlib
import json
import os
import uuid
from pathlib import Path

from storage.urls import is_url


def default_cache_dir() -> Path:
    return Path(os.environ.get("PRETRAIN_DATA_CACHE",
                               Path.home() / ".cache" / "pretrain-pipeline" / "datasets"))


def local_dataset_dir(dataset_dir: str | os.PathLike, split: str,
                      cache_dir: str | os.PathLike | None = None, *, index_file: str) -> Path:
    """`dataset_dir` itself when local; else a local copy of its `index_file` and of the
    shards that file lists for `split` (the dataset format's index, named by its caller)."""
    if not is_url(dataset_dir):
        return Path(dataset_dir)
    import fsspec

    url = str(dataset_dir).rstrip("/")
    fs, root = fsspec.core.url_to_fs(url)
    local = Path(cache_dir or default_cache_dir()) / hashlib.sha256(url.encode()).hexdigest()[:16]
    local.mkdir(parents=True, exist_ok=True)
    index_path = f"{root}/{index_file}"
    if not fs.exists(index_path):
        raise FileNotFoundError(
            f"{url}/{index_file} does not exist: {url} is not a finished dataset stage output "
            f"(run the dataset stage first: pretrain run <config> --only dataset)")
    _fetch(fs, index_path, local / index_file, check_size=False)
    index = json.loads((local / index_file).read_text(encoding="utf-8"))
    for shard in index["splits"].get(split, {}).get("shards", []):
        target = local / shard["path"]
        target.parent.mkdir(parents=True, exist_ok=True)
        _fetch(fs, f"{root}/{shard['path']}", target, check_size=True)
    return local


def _fetch(fs, remote: str, target: Path, check_size: bool) -> None:
    if check_size and target.is_file() and target.stat().st_size == fs.size(remote):
        return
    partial = target.with_name(f"{target.name}.{uuid.uuid4().hex}.partial")
    fs.get_file(remote, str(partial))
    os.replace(partial, target)
