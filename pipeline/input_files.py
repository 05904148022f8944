"""Content digests of the files a stage reads, cheapest check first (make/DVC style).

    hasher = InputHasher(workdir / ".cache" / "input-hashes.json")
    hasher.digests({"corpus/a.txt": "/data/corpus/a.txt"})   # {"corpus/a.txt": "sha256:..."}
    hasher.save()

A file's (size, mtime_ns) is compared with the cache first; only files whose stat
changed (or that the cache has never seen) are read, streamed in 1 MiB blocks, several
at a time (hashlib releases the GIL). Names are the stage's stable names for its files
(relative to data_dir where the config path was), so moving the data root to another
path with the same bytes gives the same digests; the cache itself is keyed by absolute
path and simply misses after such a move.

Files that are not on a local disk (URLs, Hub dataset names) are not hashed: their
digest is the literal "remote", so they join the fingerprint by name only.
"""

from __future__ import annotations

import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from storage.digest import sha256_file
from storage.urls import is_url

MISSING = "missing"
REMOTE = "remote"
# Show a progress bar only for hashing that takes a while (a big corpus seen first).
_PROGRESS_MIN_BYTES = 256 << 20


class InputHasher:
    def __init__(self, cache_file: Path | None, workers: int | None = None):
        self.cache_file = Path(cache_file) if cache_file else None
        self.workers = workers or min(8, (os.cpu_count() or 1) + 2)
        self._cache: dict[str, list] = self._load()
        self._dirty = False
        self.hashed_files = 0  # how many files were read (not answered by the cache)

    def _load(self) -> dict[str, list]:
        if not self.cache_file or not self.cache_file.is_file():
            return {}
        try:
            data = json.loads(self.cache_file.read_text(encoding="utf-8"))
            return data if isinstance(data, dict) else {}
        except (OSError, ValueError):
            return {}  # a damaged cache only costs a re-hash

    def digests(self, files: dict[str, str]) -> dict[str, str]:
        """stable name -> "sha256:<hex>", MISSING or REMOTE, for every file."""
        out: dict[str, str] = {}
        to_hash: list[tuple[str, str, int, int]] = []  # (name, absolute path, size, mtime_ns)
        for name, location in files.items():
            if is_url(location):
                out[name] = REMOTE
                continue
            path = os.path.abspath(os.path.expanduser(location))
            try:
                stat = os.stat(path)
            except OSError:
                out[name] = MISSING
                continue
            cached = self._cache.get(path)
            if cached and cached[0] == stat.st_size and cached[1] == stat.st_mtime_ns:
                out[name] = cached[2]
            else:
                to_hash.append((name, path, stat.st_size, stat.st_mtime_ns))
        if to_hash:
            for (name, path, size, mtime_ns), digest in zip(to_hash, self._hash_all(to_hash)):
                out[name] = digest
                self._cache[path] = [size, mtime_ns, digest]
            self._dirty = True
            self.hashed_files += len(to_hash)
        return {name: out[name] for name in files}

    def _hash_all(self, to_hash: list[tuple[str, str, int, int]]) -> list[str]:
        total = sum(size for _, _, size, _ in to_hash)
        paths = [path for _, path, _, _ in to_hash]
        with ThreadPoolExecutor(max_workers=self.workers) as pool:
            results = pool.map(lambda p: "sha256:" + sha256_file(p), paths)
            if total < _PROGRESS_MIN_BYTES:
                return list(results)
            from tqdm import tqdm

            with tqdm(total=total, unit="B", unit_scale=True, file=sys.stderr,
                      desc=f"hashing {len(paths)} input files") as bar:
                digests = []
                for (_, _, size, _), digest in zip(to_hash, results):
                    digests.append(digest)
                    bar.update(size)
                return digests

    def save(self) -> None:
        """Write the cache back (atomically: a concurrent plan may read it)."""
        if not self._dirty or not self.cache_file:
            return
        try:
            self.cache_file.parent.mkdir(parents=True, exist_ok=True)
            temp = self.cache_file.with_name(f".{self.cache_file.name}.{os.getpid()}.{time.monotonic_ns()}")
            temp.write_text(json.dumps(self._cache, separators=(",", ":")), encoding="utf-8")
            os.replace(temp, self.cache_file)
            self._dirty = False
        except OSError:
            pass  # a read-only workdir (plan on someone else's run) only loses the cache

