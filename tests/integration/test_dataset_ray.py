"""mlm and span datasets built as Ray tasks on the shared local Ray: the same bytes with
one task at a time, with two at a time, and in this process without Ray.

Tasks run one at a time because a placeholder actor holds one of the session's two
CPUs while the build runs (each build task reserves one CPU).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from stages.ray_tasks import ray_is_up, run_in_process
from tests.unit.test_dataset_objectives import build, make_corpus, make_tokenizer

pytestmark = pytest.mark.ray

# name -> (tokenizer kind, dataset options): static masks with whole words and NSP
# exercise every random draw of the mlm build; span its noise masks.
BUILDS = {
    "mlm": ("wordpiece", {"objective": "mlm", "seq_len": 48,
                          "mlm": {"masking": "static", "dupe_factor": 2,
                                  "whole_word_masking": True}}),
    "span": ("unigram", {"objective": "span", "seq_len": 32}),
}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("dataset-ray")
    ingest = make_corpus(root, num_shards=3, docs_per_shard=40, with_sentences=True)
    return {"ingest": ingest, "wordpiece": make_tokenizer(root, "wordpiece", ingest),
            "unigram": make_tokenizer(root, "unigram", ingest)}


def output_files(output_dir: Path) -> dict[str, bytes]:
    files = {str(p.relative_to(output_dir)): p.read_bytes() for p in sorted(output_dir.rglob("*"))
             if p.is_file() and p.name != "metrics.jsonl"}  # it logs tokens_per_second
    assert "index.json" in files and "train/shard-00002.arrow" in files
    return files


@pytest.mark.parametrize("name", sorted(BUILDS))
def test_ray_builds_the_same_bytes_with_one_or_two_tasks_at_a_time_and_without_ray(
        ray_session, corpus, tmp_path, name):
    kind, options = BUILDS[name]

    def build_into(directory: str) -> dict:
        return build(corpus["ingest"], corpus[kind], tmp_path / directory, **options)

    with run_in_process():
        assert not ray_is_up()
        local = build_into("local")
    assert ray_is_up()
    two_at_a_time = build_into("two")

    @ray_session.remote(num_cpus=1)
    class HoldOneCpu:
        def ready(self) -> bool:
            return True

    holder = HoldOneCpu.remote()
    try:
        assert ray_session.get(holder.ready.remote(), timeout=60)
        one_at_a_time = build_into("one")
    finally:
        ray_session.kill(holder)

    reference = output_files(tmp_path / "local")
    assert output_files(tmp_path / "two") == reference
    assert output_files(tmp_path / "one") == reference
    numbers = {k: v for k, v in local.items() if k != "tokens_per_second"}
    for metrics in (two_at_a_time, one_at_a_time):
        assert {k: metrics[k] for k in numbers} == numbers
    assert local["train_rows"] > 0 and local["validation_rows"] > 0
