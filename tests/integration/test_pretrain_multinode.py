"""The pretrain stage trains across two Ray nodes (ray.cluster_utils.Cluster on this
machine, one worker per node). The cluster runs in a subprocess, tests/multinode_pretrain.py,
which checks the run and exits non-zero on any failure."""

from __future__ import annotations

import pytest

from tests.cluster_script import run_cluster_script


@pytest.mark.ray
def test_pretrain_trains_across_two_nodes(tmp_path):
    run_cluster_script("multinode_pretrain.py", tmp_path, "MULTINODE OK", timeout=300)
