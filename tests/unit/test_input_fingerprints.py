"""Input files join fingerprints by content: an edit in place is noticed and named, a
moved data root with the same bytes changes nothing, an unchanged file is not re-read."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from pipeline.config import load_config
from pipeline.fingerprint import compute_all
from pipeline.input_files import MISSING, REMOTE, InputHasher
from pipeline.planner import plan
from stages.finetune.run import _task_digests
from stages.finetune.task_cache import task_fingerprint
from stages.finetune.config import FinetuneConfig
from tests.support.model_sources import folder_source
from tests.unit.test_engine import FakeStages, run


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    data = tmp_path / "data"
    (data / "corpus").mkdir(parents=True)
    (data / "corpus" / "a.txt").write_text("The first book.\n\nIt has two paragraphs.\n")
    (data / "corpus" / "b.txt").write_text("The second book, with one paragraph.\n")
    for task, name in (("SST-2", "sst2"), ("RTE", "rte")):
        (data / "glue_data" / task).mkdir(parents=True)
        for split in ("train", "dev", "test"):
            (data / "glue_data" / task / f"{split}.tsv").write_text(f"{name} {split}\n")
    return data


@pytest.fixture
def config_file(tmp_path: Path, data_dir: Path) -> Path:
    path = tmp_path / "experiment.yaml"
    path.write_text(
        f"name: unit\nworkdir: {tmp_path / 'work'}\ndata_dir: {data_dir}\n"
        "ingest:\n  sources:\n    - path: corpus/*.txt\nfinetune:\n  tasks: [sst2, rte]\n")
    return path


def reasons(config_file: Path, overrides=()) -> dict[str, str]:
    return {d.stage: d.reason for d in plan(load_config(config_file, list(overrides))) if d.action == "run"}


def test_editing_a_corpus_file_in_place_reruns_ingest_and_names_the_file(config_file, data_dir):
    run(config_file, FakeStages())
    (data_dir / "corpus" / "b.txt").write_text("Cut.\n")
    stale = reasons(config_file)
    assert set(stale) == {"ingest", "tokenizer", "dataset", "pretrain", "finetune", "evaluate", "report"}
    assert "input file corpus/b.txt changed" in stale["ingest"]
    assert "a.txt" not in stale["ingest"]


def test_a_new_or_removed_corpus_file_is_named(config_file, data_dir):
    run(config_file, FakeStages())
    (data_dir / "corpus" / "c.txt").write_text("A third book.\n")
    assert "new input file corpus/c.txt" in reasons(config_file)["ingest"]
    (data_dir / "corpus" / "c.txt").unlink()
    (data_dir / "corpus" / "a.txt").unlink()
    assert "input file corpus/a.txt gone" in reasons(config_file)["ingest"]


def test_editing_a_task_file_reruns_finetune_only(config_file, data_dir):
    run(config_file, FakeStages())
    with open(data_dir / "glue_data" / "SST-2" / "dev.tsv", "a") as f:
        f.write("broken\trow\n")
    stale = reasons(config_file)
    assert set(stale) == {"finetune", "report"}
    assert "input file glue_data/SST-2/dev.tsv changed" in stale["finetune"]


def test_moving_the_data_root_with_the_same_bytes_keeps_every_stage_cached(config_file, data_dir, tmp_path):
    run(config_file, FakeStages())
    moved = tmp_path / "elsewhere" / "data"
    shutil.copytree(data_dir, moved)
    shutil.rmtree(data_dir)
    decisions = plan(load_config(config_file, [f"data_dir={moved}"]))
    assert {d.action for d in decisions} == {"cached"}, [(d.stage, d.reason) for d in decisions]


def test_touching_a_file_rehashes_it_alone_and_keeps_the_cache(config_file, data_dir):
    cfg = load_config(config_file)
    first = compute_all(cfg)
    hasher = InputHasher(cfg.resolved_workdir / ".cache" / "input-hashes.json")
    hasher.digests({"a": str(data_dir / "corpus" / "a.txt"), "b": str(data_dir / "corpus" / "b.txt")})
    assert hasher.hashed_files == 0  # both answered from the cache compute_all saved
    stat = (data_dir / "corpus" / "a.txt").stat()
    os.utime(data_dir / "corpus" / "a.txt", ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    hasher = InputHasher(cfg.resolved_workdir / ".cache" / "input-hashes.json")
    hasher.digests({"a": str(data_dir / "corpus" / "a.txt"), "b": str(data_dir / "corpus" / "b.txt")})
    assert hasher.hashed_files == 1
    assert compute_all(cfg) == first  # same bytes: same fingerprints


def test_a_same_size_edit_is_caught_by_its_new_mtime(tmp_path):
    file = tmp_path / "f.txt"
    file.write_text("aaaa")
    hasher = InputHasher(tmp_path / "cache.json")
    before = hasher.digests({"f": str(file)})["f"]
    hasher.save()
    stat = file.stat()
    file.write_text("bbbb")
    os.utime(file, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1))
    assert InputHasher(tmp_path / "cache.json").digests({"f": str(file)})["f"] != before


def test_missing_and_remote_inputs_are_marked_not_read(tmp_path):
    digests = InputHasher(None).digests({"gone": str(tmp_path / "nope"), "s3": "s3://bucket/key.txt"})
    assert digests == {"gone": MISSING, "s3": REMOTE}


def test_a_damaged_hash_cache_only_costs_a_rehash(tmp_path):
    (tmp_path / "cache.json").write_text("{not json")
    file = tmp_path / "f.txt"
    file.write_text("x")
    hasher = InputHasher(tmp_path / "cache.json")
    assert hasher.digests({"f": str(file)})["f"].startswith("sha256:")
    assert hasher.hashed_files == 1


def test_each_task_fingerprint_follows_only_its_own_files(config_file, data_dir):
    cfg = load_config(config_file)
    source = folder_source(data_dir / "no-model")
    finetune = FinetuneConfig(tasks=["sst2", "rte"])

    def fingerprints() -> dict[str, str]:
        digests = compute_all(cfg)["finetune"][1]["data"]
        return {task: task_fingerprint(task, finetune, seed=0, source=source,
                                       data=_task_digests(digests, task, finetune, data_dir))
                for task in ("sst2", "rte")}

    before = fingerprints()
    (data_dir / "glue_data" / "SST-2" / "dev.tsv").write_text("edited\n")
    after = fingerprints()
    assert after["sst2"] != before["sst2"] and after["rte"] == before["rte"]


def test_init_from_folder_contents_join_the_fingerprint(config_file, tmp_path):
    folder = tmp_path / "minilm"
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(b"weights")
    override = [f"finetune.init_from={folder}"]
    identity = compute_all(load_config(config_file, override))["finetune"][1]
    assert "finetune.init_from/model.safetensors" in identity["data"]
    (folder / "model.safetensors").write_bytes(b"other weights")
    assert "input file finetune.init_from/model.safetensors changed" in \
        describe(config_file, override, identity)


def describe(config_file, override, old_identity) -> str:
    from pipeline.planner import describe_change

    return describe_change(old_identity, compute_all(load_config(config_file, override))["finetune"][1])
