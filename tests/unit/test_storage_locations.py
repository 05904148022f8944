"""One answer, in storage/, to "is this a URL?" and "do other machines see this disk?":
three copies of the first and two of the second once disagreed."""

from __future__ import annotations

from pathlib import Path

import pytest

from storage import mounts
from storage.errors import ConfigError
from storage.stage_lock import lock_mode
from storage.urls import is_url


@pytest.mark.parametrize("location, expected", [
    ("s3://bucket/x", True), ("gs://bucket", True), ("memory://x", True),
    ("runs/x", False), ("/data/runs", False), ("C:/runs", False), (Path("runs"), False), (None, False),
])
def test_a_url_or_a_path(location, expected):
    assert is_url(location) is expected


@pytest.mark.parametrize("location", ["s3:/bucket/x", "gs:bucket/x"])
def test_a_url_with_a_slash_missing_is_an_error_naming_it(location):
    # One copy took "s3:/bucket/x" for the local folder ./s3:/bucket/x.
    with pytest.raises(ConfigError, match=f"'{location}': a slash missing"):
        is_url(location)


@pytest.mark.parametrize("fs_type", ["fuse.sshfs", "afs", "fuse.gcsfuse", "efs"])
def test_submit_and_the_stage_lock_agree_on_a_network_mount(tmp_path, monkeypatch, fs_type):
    # The lock's list had fuse.sshfs and afs, submit's fuse.gcsfuse and efs (among others):
    # submit accepted a workdir the lock then flock-ed as if it were a local disk.
    proc_mounts = tmp_path / "mounts"
    proc_mounts.write_text(f"/dev/sda1 / ext4 rw 0 0\nserver:/runs /mnt/shared {fs_type} rw 0 0\n")
    monkeypatch.setattr(mounts, "PROC_MOUNTS", proc_mounts)
    monkeypatch.delenv("PRETRAIN_LOCK_MODE", raising=False)
    assert mounts.is_shared_storage("/mnt/shared/runs/gpt")
    assert lock_mode(Path("/mnt/shared/runs/gpt")) == "file"
    assert lock_mode(tmp_path) == "flock"
