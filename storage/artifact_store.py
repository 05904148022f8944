"""Where a run's stages keep their outputs: one protocol, two stores.

The engine (pipeline.runner, pipeline.planner) only ever talks to this protocol; a run's
`store` setting picks the implementation (`open_store`):

- storage.local_store.LocalArtifactStore: `<workdir>/<stage>/<fingerprint>/` on a local
  or mounted disk, the manifest written last, atomically (a rename);
- storage.object_store.ObjectArtifactStore: the same layout under a bucket prefix, written
  in this machine's mirror, the manifest committed last by a conditional create.

Either way a stage is finished exactly when its manifest exists, one driver writes it at
a time (`lock`), and `stage_dir` is a local folder the stage reads and writes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol, runtime_checkable

from storage.local_store import Damage, LocalArtifactStore
from storage.urls import is_url


@runtime_checkable
class ArtifactStore(Protocol):
    url: str | None      # the object store's URL; None for a local store
    workdir: Path        # the local folder stage directories are in (an object store's mirror)

    def stage_dir(self, stage: str, fingerprint: str) -> Path: ...

    def stage_url(self, stage: str, fingerprint: str) -> str | None: ...

    def fetch(self, stage: str, fingerprint: str, *, max_file_bytes: int | None = None,
              leave: tuple[str, ...] = ()) -> Path: ...

    def started(self, stage: str, fingerprint: str) -> bool: ...

    def lock(self, stage: str, fingerprint: str, *, what: str, wait: bool = False, echo=print): ...

    def lock_holder(self, stage: str, fingerprint: str) -> dict | None: ...

    def manifest(self, stage: str, fingerprint: str) -> dict | None: ...

    def is_finished(self, stage: str, fingerprint: str) -> bool: ...

    def damaged(self, stage: str, fingerprint: str, *, deep: bool = False,
                manifest: dict | None = None) -> list[Damage]: ...

    def remove_damaged(self, stage: str, fingerprint: str, damage: list[Damage], *,
                       scope: str = "top") -> None: ...

    def previous_manifests(self, stage: str) -> list[dict]: ...

    def prepare(self, stage: str, fingerprint: str, *, keep_partial: bool) -> Path: ...

    def write_manifest(self, stage: str, fingerprint: str, manifest: dict) -> Path: ...

    def write_failure(self, stage: str, fingerprint: str, failure: dict) -> None: ...

    def failure(self, stage: str, fingerprint: str) -> dict | None: ...


def open_store(location: str | Path, mirror: Path | None = None) -> ArtifactStore:
    """The store at a path or at an object-store URL (s3://bucket/prefix, gs://...)."""
    if is_url(location):
        from storage.object_store import ObjectArtifactStore  # fsspec only for a bucket

        return ObjectArtifactStore(str(location), mirror)
    return LocalArtifactStore(Path(location))
