"""The stage store's promises on a real finished run, through the real CLI: an input file
edited in place is named by `plan`; a moved data root changes nothing; a truncated
shard is noticed and rebuilt byte for byte; flipped bytes are found by `verify`; a
second driver is refused while the first holds a stage."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from pipeline.graph import STAGE_NAMES
from storage.stage_lock import StageLock
from tests.e2e.cli import pretrain_cli
from tests.e2e.conftest import CONFIG

pytestmark = [pytest.mark.e2e, pytest.mark.ray]
CORPUS = ("pg7700.txt", "pg1250.txt", "The-Dunwich-Horror.txt", "pg851.txt")


@pytest.fixture
def run_copy(finished_run, tmp_path):
    """A private copy of the finished run (tests here damage it)."""
    workdir, args, _ = finished_run
    copy = tmp_path / "gpt-tiny"
    shutil.copytree(workdir, copy, symlinks=True)
    return copy, (CONFIG, "-o", f"workdir={copy}", *args[3:])


@pytest.fixture
def data_copy(data_dir, tmp_path) -> Path:
    """data_dir rebuilt elsewhere from links to the same files (edits replace a link): the
    four books, SST-2 and the evaluation sets gpt-tiny reads."""
    copy = tmp_path / "data"
    (copy / "corpus" / "gutenberg").mkdir(parents=True)
    for name in CORPUS:
        (copy / "corpus" / "gutenberg" / name).symlink_to(data_dir / "corpus" / "gutenberg" / name)
    (copy / "glue_data").mkdir()
    (copy / "glue_data" / "SST-2").symlink_to(data_dir / "glue_data" / "SST-2")
    (copy / "eval").symlink_to(data_dir / "eval")  # the evaluate stage's sets
    return copy


def plan_lines(*args: str) -> dict[str, str]:
    result = pretrain_cli("plan", *args)
    assert result.returncode == 0, result.stdout + result.stderr
    return {line.split()[0]: line for line in result.stdout.splitlines()
            if line.split() and line.split()[0] in STAGE_NAMES}


def test_moved_data_is_cached_and_an_edit_in_place_is_named(run_copy, data_copy):
    _, args = run_copy
    moved = (*args, "-o", f"data_dir={data_copy}")
    lines = plan_lines(*moved)
    assert all(" cached " in line for line in lines.values()), lines

    book = data_copy / "corpus" / "gutenberg" / "pg851.txt"
    text = book.read_bytes()[:1000]
    book.unlink()
    book.write_bytes(text)  # the book cut to 1 kB, as measured
    sst2 = data_copy / "glue_data" / "SST-2"
    sst2.unlink()
    shutil.copytree(_shared_sst2(), sst2)
    with open(sst2 / "dev.tsv", "a") as f:
        f.write("not a row\n")
    lines = plan_lines(*moved)
    assert " run " in lines["ingest"] and "input file corpus/gutenberg/pg851.txt changed" in lines["ingest"]
    assert "input file glue_data/SST-2/dev.tsv changed" in lines["finetune"]


def _shared_sst2() -> Path:
    from tests.conftest import DATA_DIR

    return DATA_DIR / "glue_data" / "SST-2"


def test_a_truncated_shard_is_noticed_and_rebuilt_byte_for_byte(run_copy):
    workdir, args = run_copy
    (shard,) = workdir.glob("dataset/*/train/shard-00001.arrow")
    original = shard.read_bytes()
    shard.write_bytes(original[: len(original) // 2])

    lines = plan_lines(*args)
    assert " run " in lines["dataset"] and "damaged output: train/shard-00001.arrow is" in lines["dataset"]
    assert all(" cached " in lines[s] for s in ("ingest", "tokenizer", "pretrain", "finetune", "evaluate", "report"))
    status = pretrain_cli("status", str(workdir))
    assert any(l.startswith("dataset") and "damaged" in l for l in status.stdout.splitlines())

    rerun = pretrain_cli("run", *args)
    assert rerun.returncode == 0, rerun.stdout[-3000:] + rerun.stderr[-3000:]
    assert "[dataset] removing damaged output" in rerun.stdout and "[dataset] done" in rerun.stdout
    assert "[pretrain] cached" in rerun.stdout
    assert shard.read_bytes() == original


def test_flipped_model_bytes_are_found_by_verify_and_repaired_by_run_verify(run_copy):
    workdir, args = run_copy
    (weights,) = workdir.glob("pretrain/*/model/model.safetensors")
    data = bytearray(weights.read_bytes())
    for i in range(len(data) - 64, len(data)):  # 64 flipped bytes in the tensor data
        data[i] ^= 0xFF
    weights.write_bytes(bytes(data))

    verify = pretrain_cli("verify", str(workdir))
    assert verify.returncode == 1, verify.stdout
    assert "model/model.safetensors has other bytes" in verify.stdout
    assert "--verify" in verify.stdout
    assert all(" cached " in line for line in plan_lines(*args).values())  # sizes agree

    repair = pretrain_cli("run", *args, "--verify")
    assert repair.returncode == 0, repair.stdout[-3000:] + repair.stderr[-3000:]
    assert "[pretrain] removing damaged output" in repair.stdout and "[pretrain] done" in repair.stdout
    assert pretrain_cli("verify", str(workdir)).returncode == 0


def test_a_second_driver_is_refused_while_a_stage_is_held(run_copy):
    workdir, args = run_copy
    (stage_dir,) = workdir.glob("report/*/")
    lock = stage_dir.parent / f".{stage_dir.name}.lock"
    with StageLock(lock, what="report"):
        result = pretrain_cli("run", *args, "--force", "report")
    assert result.returncode == 2, result.stdout + result.stderr
    assert f"is being written by pid {os.getpid()}" in result.stderr
