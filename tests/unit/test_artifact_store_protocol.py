"""Both stage stores are one protocol (storage.artifact_store.ArtifactStore): the engine
calls either the same way, so a method one of them lacks or names differently fails here
rather than in the first object-store run."""

from __future__ import annotations

import inspect

import pytest

from storage.artifact_store import ArtifactStore, open_store
from storage.local_store import LocalArtifactStore
from storage.object_store import ObjectArtifactStore

METHODS = sorted(name for name, value in vars(ArtifactStore).items()
                 if callable(value) and not name.startswith("_"))


@pytest.mark.parametrize("store_class", [LocalArtifactStore, ObjectArtifactStore])
@pytest.mark.parametrize("method", METHODS)
def test_each_store_takes_what_the_protocol_passes(store_class, method):
    declared = inspect.signature(getattr(ArtifactStore, method)).parameters
    given = inspect.signature(getattr(store_class, method)).parameters
    assert list(declared) == list(given)[:len(declared)], f"{store_class.__name__}.{method}{given}"
    extra = list(given.values())[len(declared):]
    assert all(p.default is not inspect.Parameter.empty for p in extra), f"{store_class.__name__}.{method}"


def test_open_store_gives_a_store_of_the_protocol(tmp_path):
    assert isinstance(open_store(tmp_path), ArtifactStore)
    assert isinstance(open_store("memory://runs/protocol-check", tmp_path / "mirror"), ArtifactStore)
