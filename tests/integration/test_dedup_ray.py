"""The distributed dedup's partition and keep-mask tasks on the session's Ray keep the
same documents and write the same shards as the single-driver path in this process."""

from __future__ import annotations

import pytest

from stages.ingest.config import IngestConfig
from stages.ray_tasks import run_in_process
from tests.support.dedup_reference import distributed, single_driver

pytestmark = pytest.mark.ray


def test_dedup_tasks_on_ray_match_the_single_driver_path(ray_session, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    words = [f"word{i}" for i in range(200)]
    texts = [" ".join(words[i:i + 40]) for i in range(0, 160, 8)]
    near = [t.replace(t.split()[20], "changed") for t in texts[::3]]
    (data / "a.txt").write_text("\n\n".join(texts[:10] + near) + "\n", encoding="utf-8")
    (data / "b.txt").write_text("\n\n".join(texts + texts[:4]) + "\n", encoding="utf-8")
    config = IngestConfig(sources=[{"path": "*.txt"}], dedup="near", num_shards=3)
    with run_in_process():
        masks, shards = single_driver(config, data, tmp_path / "reference")
    got, got_shards, kept = distributed(config, data, tmp_path / "ray", 3)
    assert [m.tolist() for m in got] == [m.tolist() for m in masks]
    assert got_shards == shards
    assert sum(k.exact_duplicate[0] for k in kept) == 14
    assert sum(k.near_duplicate[0] for k in kept) > 0
