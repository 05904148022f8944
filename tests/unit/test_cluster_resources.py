"""The pre-submit resource check: a fixed cluster too small for the config is refused
(a Ray Train run would wait forever); an autoscaling one only gets a warning."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from cluster import resources
from cluster.errors import ClusterError

FIXED = "Cluster status: 0 nodes\n - ResourceUsage: 0.0/2.0 CPU\nWorker node types:"
AUTOSCALING = "Cluster status: 1 nodes\nWorker node types:\n - gpu_worker: 0 (max 4)"


def config(pretrain_workers: int, finetune_workers: int = 2):
    return SimpleNamespace(name="exp", pretrain=SimpleNamespace(num_workers=pretrain_workers),
                           finetune=SimpleNamespace(num_workers=finetune_workers))


def fake_dashboard(monkeypatch, cpus: float, status: str | None) -> None:
    answers = {
        "/api/v0/nodes": {"data": {"result": {"result": [
            {"state": "ALIVE", "resources_total": {"CPU": cpus, "memory": 1e9}},
            {"state": "DEAD", "resources_total": {"CPU": 64.0}}]}}},
        "/api/cluster_status": {"data": {"autoscalingStatus": status}},
    }
    monkeypatch.setattr(resources, "_get_json",
                        lambda url: next(v for k, v in answers.items() if k in url))


def test_a_fixed_cluster_without_the_cpus_is_refused(monkeypatch):
    fake_dashboard(monkeypatch, cpus=2.0, status=FIXED)
    with pytest.raises(ClusterError, match="4 CPU needed, 2 present.*pretrain.num_workers=4"):
        resources.check_fits(config(4), "http://head:8265")


def test_an_autoscaling_cluster_only_warns(monkeypatch):
    fake_dashboard(monkeypatch, cpus=2.0, status=AUTOSCALING)
    said = []
    resources.check_fits(config(4), "http://head:8265", echo=said.append)
    assert said and "autoscaler should add nodes" in said[0]


def test_enough_cpus_pass_silently_and_dead_nodes_do_not_count(monkeypatch):
    fake_dashboard(monkeypatch, cpus=4.0, status=FIXED)
    said = []
    resources.check_fits(config(4), "http://head:8265", echo=said.append)
    assert said == []
    assert resources.cluster_resources("http://head:8265")[0]["CPU"] == 4.0


def test_an_unreadable_status_is_a_warning_not_a_failure(monkeypatch):
    def unreachable(url):
        raise OSError("HTTP 401 (token auth)")

    monkeypatch.setattr(resources, "_get_json", unreachable)
    said = []
    resources.check_fits(config(64), "http://head:8265", echo=said.append)
    assert "could not read the cluster's resources" in said[0]
