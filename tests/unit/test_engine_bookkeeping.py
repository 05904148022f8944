"""What a stage directory holds besides outputs: a failure that cannot be recorded on a
full disk, temporary files left by killed or failed writes, tracking folders. None of it
is ever listed in a manifest, and none of it makes a finished stage look damaged.

A full disk is /dev/full: a write there fails with ENOSPC like one on a full file system,
for root too (a read-only folder does not stop root)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from pipeline.runner import StageFailed
from storage.local_store import FAILURE, LocalArtifactStore, inventory
from tests.unit.test_engine import FakeStages, config_file, run  # noqa: F401  (fixture)
from tests.unit.test_engine_outputs import stage_dir

FULL_DISK = Path("/dev/full")


def write_to_full_disk() -> None:
    with open(FULL_DISK, "w") as f:
        f.write("x" * 4096)
        f.flush()  # raises OSError(ENOSPC)


class FullDiskStages(FakeStages):
    """`stage` fails on a full disk, where its failure record cannot be written either:
    the record's temporary name (write_json_atomic's `.failure.json.tmp-<pid>`) leads to
    /dev/full."""

    def __init__(self, stage: str):
        super().__init__()
        self.full = stage

    def __call__(self, spec):
        def stage(ctx):
            self.calls.append(spec.name)
            (ctx.output_dir / "out.txt").write_text(spec.name)
            if spec.name == self.full:
                (ctx.output_dir / f".{FAILURE}.tmp-{os.getpid()}").symlink_to(FULL_DISK)
                write_to_full_disk()
            return {}

        return stage


pytestmark = pytest.mark.skipif(not FULL_DISK.exists(), reason="needs /dev/full (Linux)")


def test_a_failure_that_cannot_be_recorded_still_raises_the_stage_error(config_file, capsys):
    with pytest.raises(StageFailed) as failed:
        run(config_file, FullDiskStages("tokenizer"))
    assert str(failed.value).startswith("stage 'tokenizer' failed: OSError: [Errno 28] No space left")
    stderr = capsys.readouterr().err
    assert "warning: could not record the failure of stage 'tokenizer'" in stderr
    assert f"/{FAILURE} (OSError: [Errno 28] No space left on device)" in stderr
    directory = stage_dir(config_file, "tokenizer")
    assert not (directory / FAILURE).exists()
    assert not list(directory.glob(f".{FAILURE}.tmp-*")), "the failed write left its temporary file"


def test_leftover_temporaries_are_removed_and_never_listed(config_file):
    """An earlier attempt of the (resuming) dataset stage was killed: it left an atomic
    write's temp, a 0-byte failure temp, and a shard under its .partial name."""
    with pytest.raises(KeyboardInterrupt):
        run(config_file, FakeStages(fail={"dataset": KeyboardInterrupt()}))
    directory = stage_dir(config_file, "dataset")
    (directory / f".{FAILURE}.tmp-1234").touch()
    (directory / "train").mkdir()
    (directory / "train" / ".index.json.tmp-99").write_text("{")
    (directory / "train" / "shard-00001.arrow.partial").write_bytes(b"rows so far")
    seen = {}

    class Observing(FakeStages):
        def __call__(self, spec):
            inner = super().__call__(spec)

            def stage(ctx):
                if spec.name == "dataset":
                    seen["names"] = sorted(p.name for p in ctx.output_dir.rglob("*"))
                    (ctx.output_dir / "step-0000010.partial").mkdir()  # a kill mid-rename, say
                    (ctx.output_dir / "step-0000010.partial" / "weights").write_text("half")
                return inner(ctx)

            return stage

    run(config_file, Observing())
    # Before the retry: the atomic temps are gone, the stage's own progress is kept.
    assert ".failure.json.tmp-1234" not in seen["names"] and ".index.json.tmp-99" not in seen["names"]
    assert "shard-00001.arrow.partial" in seen["names"]
    manifest = json.loads((directory / "manifest.json").read_text())
    assert [f["path"] for f in manifest["files"]] == ["out.txt"]
    # At the commit: no temporary of any kind is left beside the outputs.
    assert sorted(p.relative_to(directory).as_posix() for p in directory.rglob("*")) == [
        "manifest.json", "out.txt", "train"]


def test_tracking_files_are_not_outputs_so_their_later_writes_damage_nothing(tmp_path):
    stage = tmp_path / "pretrain" / "fp"
    (stage / "model").mkdir(parents=True)
    (stage / "model" / "weights").write_bytes(b"w" * 10)
    (stage / "wandb" / "offline-run-1" / "logs").mkdir(parents=True)
    (stage / "wandb" / "offline-run-1" / "logs" / "debug.log").write_text("first\n")
    (stage / "wandb" / "debug.log").symlink_to(stage / "wandb" / "offline-run-1" / "logs" / "debug.log")
    (stage / "sst2" / "wandb").mkdir(parents=True)  # a fine-tuning task's own run
    (stage / "sst2" / "wandb" / "run-id.txt").write_text("abc\n")
    (stage / "sst2" / "metrics.json").write_text("{}")
    files = inventory(stage)
    assert [f["path"] for f in files] == ["model/weights", "sst2/metrics.json"]

    store = LocalArtifactStore(tmp_path)
    store.write_manifest("pretrain", "fp", {"files": files})
    # wandb writes on after the manifest (its core process, the engine's per-stage run).
    (stage / "wandb" / "offline-run-1" / "logs" / "debug.log").write_text("first\nand more\n")
    (stage / "sst2" / "wandb" / "run-id.txt").write_text("other\n")
    assert store.damaged("pretrain", "fp", deep=True) == []
