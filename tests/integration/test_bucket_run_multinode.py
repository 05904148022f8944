"""An object-store run's tasks and Ray Train workers spread over two Ray nodes that do not
share the run's files (ray.cluster_utils.Cluster on this machine, each node with its own
mirror). The cluster runs in a subprocess, tests/support/multinode_bucket_run.py, which checks
the run and exits non-zero on any failure."""

from __future__ import annotations

import pytest

from tests.support.cluster_script import run_cluster_script


@pytest.mark.ray
def test_a_bucket_run_spreads_its_tasks_and_workers_over_nodes_without_shared_files(tmp_path):
    run_cluster_script("multinode_bucket_run.py", tmp_path, "MULTINODE BUCKET OK", timeout=600)
