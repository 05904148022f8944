"""The pre-submit resource check: a fixed cluster too small for the config is refused
(a Ray Train run would wait forever); an autoscaling one only gets a warning."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from cluster import resources
from cluster.errors import ClusterError

FIXED = "Cluster status: 0 nodes\n - ResourceUsage: 0.0/2.0 CPU\nWorker node types:"
AUTOSCALING = "Cluster status: 1 nodes\nWorker node types:\n - gpu_worker: 0 (max 4)"


def config(pretrain_workers: int, finetune_workers: int = 2, pretrain_gpus: int = 0, finetune_gpus: int = 0):
    return SimpleNamespace(
        name="exp", pretrain=SimpleNamespace(num_workers=pretrain_workers, gpus_per_worker=pretrain_gpus),
        finetune=SimpleNamespace(num_workers=finetune_workers, gpus_per_worker=finetune_gpus))


def fake_dashboard(monkeypatch, cpus: float, status: str | None, gpus: float = 0.0) -> None:
    alive = {"CPU": cpus, "memory": 1e9, **({"GPU": gpus} if gpus else {})}
    answers = {
        "/api/v0/nodes": {"data": {"result": {"result": [
            {"state": "ALIVE", "resources_total": alive},
            {"state": "DEAD", "resources_total": {"CPU": 64.0, "GPU": 8.0}}]}}},
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


def test_gpus_needed_are_workers_times_gpus_per_worker_of_the_largest_stage():
    # CPU-only configs ask for no GPU at all (as before).
    assert resources.required_resources(config(4, 2)) == {"CPU": 4.0}
    # Stages run one after another: the maximum over stages, not the sum.
    assert resources.required_resources(config(4, 2, pretrain_gpus=1, finetune_gpus=1)) == {"CPU": 4.0, "GPU": 4.0}
    assert resources.required_resources(config(2, 3, pretrain_gpus=1)) == {"CPU": 3.0, "GPU": 2.0}
    assert resources.required_resources(config(2, 3, finetune_gpus=1)) == {"CPU": 3.0, "GPU": 3.0}


def test_a_fixed_cluster_without_gpus_is_refused_naming_the_config_key(monkeypatch):
    fake_dashboard(monkeypatch, cpus=8.0, status=FIXED)  # the dead node's 8 GPUs do not count
    with pytest.raises(ClusterError) as raised:
        resources.check_fits(config(2, 2, pretrain_gpus=1), "http://head:8265")
    message = str(raised.value)
    assert "2 GPU needed, 0 present" in message
    assert "pretrain.num_workers=2 x pretrain.gpus_per_worker=1" in message
    assert "finetune.gpus_per_worker" not in message  # finetune asks for none
    assert "no GPUs" in message and "-o pretrain.gpus_per_worker=0" in message
    assert "CPU needed" not in message  # the CPUs are enough
    assert raised.value.exit_code == 1


def test_a_fixed_cluster_with_too_few_gpus_is_refused(monkeypatch):
    fake_dashboard(monkeypatch, cpus=8.0, status=FIXED, gpus=2.0)
    with pytest.raises(ClusterError, match="4 GPU needed, 2 present.*finetune.num_workers=4 x "
                                           "finetune.gpus_per_worker=1.*Lower num_workers"):
        resources.check_fits(config(2, 4, pretrain_gpus=1, finetune_gpus=1), "http://head:8265")


def test_cpus_and_gpus_short_together_are_both_named(monkeypatch):
    fake_dashboard(monkeypatch, cpus=2.0, status=FIXED)
    with pytest.raises(ClusterError, match="4 CPU needed, 2 present, 4 GPU needed, 0 present"):
        resources.check_fits(config(4, 2, pretrain_gpus=1), "http://head:8265")


def test_enough_gpus_pass_silently(monkeypatch):
    fake_dashboard(monkeypatch, cpus=4.0, status=FIXED, gpus=4.0)
    said = []
    resources.check_fits(config(4, 2, pretrain_gpus=1, finetune_gpus=1), "http://head:8265", echo=said.append)
    assert said == []


def test_missing_gpus_on_an_autoscaling_cluster_only_warn(monkeypatch):
    fake_dashboard(monkeypatch, cpus=8.0, status=AUTOSCALING)
    said = []
    resources.check_fits(config(2, 2, pretrain_gpus=1), "http://head:8265", echo=said.append)
    assert said and "2 GPU needed, 0 present" in said[0] and "autoscaler should add nodes" in said[0]


def test_a_just_started_head_is_asked_again_until_it_lists_itself(monkeypatch):
    answers = iter([{"data": {"result": {"result": []}}}, {"data": {"autoscalingStatus": None}},
                    {"data": {"result": {"result": [{"state": "ALIVE", "resources_total": {"CPU": 2.0}}]}}},
                    {"data": {"autoscalingStatus": FIXED}}])
    monkeypatch.setattr(resources, "_get_json", lambda url: next(answers))
    monkeypatch.setattr(resources.time, "sleep", lambda seconds: None)
    assert resources.cluster_resources("http://head:8265") == ({"CPU": 2.0}, False)
