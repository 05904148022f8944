"""The manifest's atomic write (storage/local_store.py write_json_atomic: temp, fsync, rename,
fsync of the folder) crashing at each step: the old manifest survives intact (or, once
the rename is done, the new one is complete), and the temp is removed or, after a kill
that leaves it, never taken for a manifest nor listed as an output."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from storage.local_store import MANIFEST, LocalArtifactStore, inventory, remove_temporaries

REPO_ROOT = Path(__file__).resolve().parents[2]
STAGE, FINGERPRINT = "pretrain", "fp1"
OLD = {"fingerprint": FINGERPRINT, "metrics": {"final_loss": 3.5},
       "files": [{"path": "weights.bin", "bytes": 100, "sha256": "0" * 64}]}
NEW = {**OLD, "metrics": {"final_loss": 2.5}}


@pytest.fixture
def store(tmp_path) -> LocalArtifactStore:
    """A finished stage: weights.bin and the OLD manifest."""
    store = LocalArtifactStore(tmp_path / "run")
    directory = store.prepare(STAGE, FINGERPRINT, keep_partial=False)
    (directory / "weights.bin").write_bytes(b"w" * 100)
    store.write_manifest(STAGE, FINGERPRINT, OLD)
    return store


def names(store: LocalArtifactStore) -> list[str]:
    return sorted(p.name for p in store.stage_dir(STAGE, FINGERPRINT).iterdir())


def assert_old_manifest_stands(store: LocalArtifactStore, old_bytes: bytes) -> None:
    assert (store.stage_dir(STAGE, FINGERPRINT) / MANIFEST).read_bytes() == old_bytes
    assert store.manifest(STAGE, FINGERPRINT) == OLD and store.is_finished(STAGE, FINGERPRINT)


class FailsWhenWritten:
    """A value json.dump reaches after the manifest's first key (sort_keys): turning it
    into text raises, with part of the temp file already on disk (recorded)."""

    def __init__(self, directory: Path):
        self.directory = directory
        self.temp_bytes_at_failure = None

    def __str__(self) -> str:
        temps = list(self.directory.glob(f".{MANIFEST}.tmp-*"))
        self.temp_bytes_at_failure = [t.stat().st_size for t in temps]
        raise RuntimeError("this value cannot be written")


def test_a_value_failing_midway_through_the_write_leaves_the_old_manifest(store):
    directory = store.stage_dir(STAGE, FINGERPRINT)
    old_bytes = (directory / MANIFEST).read_bytes()
    failing = FailsWhenWritten(directory)
    # 200 kB before the failing value: more than any write buffer, so on disk by then.
    with pytest.raises(RuntimeError, match="cannot be written"):
        store.write_manifest(STAGE, FINGERPRINT, {"a_notes": "x" * 200_000, "z_value": failing})
    assert len(failing.temp_bytes_at_failure) == 1 and failing.temp_bytes_at_failure[0] > 100_000
    assert_old_manifest_stands(store, old_bytes)
    assert names(store) == [MANIFEST, "weights.bin"]  # the half-written temp is gone


@pytest.mark.parametrize("step", ["fsync of the file", "rename"])
def test_a_crash_before_the_rename_leaves_the_old_manifest(store, monkeypatch, step):
    directory = store.stage_dir(STAGE, FINGERPRINT)
    old_bytes = (directory / MANIFEST).read_bytes()

    def no_space(*args):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync" if step == "fsync of the file" else "replace", no_space)
    with pytest.raises(OSError, match="No space left"):
        store.write_manifest(STAGE, FINGERPRINT, NEW)
    monkeypatch.undo()
    assert_old_manifest_stands(store, old_bytes)
    assert names(store) == [MANIFEST, "weights.bin"]


def test_a_crash_after_the_rename_leaves_the_new_manifest_complete(store, monkeypatch):
    real_fsync, calls = os.fsync, []

    def folder_fsync_fails(fd):
        calls.append(fd)
        if len(calls) == 2:  # the first is the temp file's, the second the folder's
            raise OSError(errno.EIO, "Input/output error")
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", folder_fsync_fails)
    with pytest.raises(OSError, match="Input/output error"):
        store.write_manifest(STAGE, FINGERPRINT, NEW)
    monkeypatch.undo()
    assert store.manifest(STAGE, FINGERPRINT) == NEW
    assert names(store) == [MANIFEST, "weights.bin"]


# A driver killed (SIGKILL) in the middle of writing the manifest: nothing of it can clean
# up, so the half-written temp stays. `first` = no manifest existed before.
KILLED_WRITER = """
import os, signal, sys
from pathlib import Path
from storage.local_store import LocalArtifactStore

class KilledHere:
    def __str__(self):
        os.kill(os.getpid(), signal.SIGKILL)

store = LocalArtifactStore(Path(sys.argv[1]))
store.write_manifest("pretrain", "fp1", {"a_notes": "x" * 200_000, "z": KilledHere()})
"""


@pytest.mark.parametrize("first", [False, True])
def test_a_killed_writer_leaves_a_temp_that_is_never_a_manifest_nor_an_output(store, first):
    directory = store.stage_dir(STAGE, FINGERPRINT)
    old_bytes = (directory / MANIFEST).read_bytes()
    if first:
        (directory / MANIFEST).unlink()
    killed = subprocess.run([sys.executable, "-c", KILLED_WRITER, str(store.workdir)], cwd=REPO_ROOT)
    assert killed.returncode == -9
    (temp,) = directory.glob(f".{MANIFEST}.tmp-*")
    assert temp.stat().st_size > 100_000  # half written
    if first:
        assert store.manifest(STAGE, FINGERPRINT) is None and not store.is_finished(STAGE, FINGERPRINT)
        assert store.previous_manifests(STAGE) == []
    else:
        assert_old_manifest_stands(store, old_bytes)
        assert store.previous_manifests(STAGE) == [OLD]
    assert [f["path"] for f in inventory(directory)] == ["weights.bin"]
    assert remove_temporaries(directory) == [temp] and not temp.exists()
    store.write_manifest(STAGE, FINGERPRINT, NEW)  # the next commit is whole
    assert json.loads((directory / MANIFEST).read_text()) == NEW
