"""The cluster definitions in cluster/ parse, hold the fields their tools require, and
agree with the project: Ray/Python versions of the images, GPU counts, the shared
workdir mount, and room for every config's Ray Train workers."""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path

import pytest
import yaml

from pipeline.cli import build_parser
from pipeline.config import load_config

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = ROOT / "cluster"
SHARED = "/mnt/shared"
PYTHON_TAG = f"py{sys.version_info.major}{sys.version_info.minor}"


def pinned(package: str) -> str:
    text = (ROOT / "requirements" / "runtime.txt").read_text()
    return re.search(rf"^{re.escape(package)}(\[[^\]]*\])?==(\S+)", text, re.M).group(2)


def makefile_version(name: str) -> str:
    return re.search(rf"^{name} \?= (\S+)", (ROOT / "Makefile").read_text(), re.M).group(1)


def load(name: str) -> dict:
    return yaml.safe_load((CLUSTER / name).read_text())


def max_train_workers() -> int:
    configs = [load_config(path) for path in sorted((ROOT / "configs").glob("*.yaml"))]
    return max(max(c.pretrain.num_workers, c.finetune.num_workers) for c in configs)


def test_launcher_yaml_has_a_cpu_head_and_gpu_workers_on_shared_storage():
    spec = load("ray-cluster.yaml")
    for key in ("cluster_name", "provider", "available_node_types", "head_node_type", "max_workers"):
        assert key in spec, f"ray-cluster.yaml lacks {key}"
    nodes = spec["available_node_types"]
    head = nodes[spec["head_node_type"]]
    assert head["resources"].get("GPU", 0) == 0 and head["node_config"]["InstanceType"]
    workers = [n for name, n in nodes.items() if name != spec["head_node_type"]]
    assert workers and all(n["resources"]["GPU"] > 0 for n in workers)
    for worker in workers:
        assert 0 <= worker["min_workers"] <= worker["max_workers"] <= spec["max_workers"]
        capacity = worker["max_workers"] * min(worker["resources"]["CPU"], worker["resources"]["GPU"])
        assert capacity >= max_train_workers(), "the GPU group cannot hold the configs' Ray Train workers"
    assert f"-v {SHARED}:{SHARED}" in spec["docker"]["run_options"]
    assert any(SHARED in c and "mount" in c for c in spec["initialization_commands"])


def test_launcher_images_and_installs_match_the_pins():
    spec = load("ray-cluster.yaml")
    ray = pinned("ray")
    assert spec["docker"]["head_image"] == f"rayproject/ray:{ray}-{PYTHON_TAG}-cpu"
    assert spec["docker"]["worker_image"] == f"rayproject/ray:{ray}-{PYTHON_TAG}-gpu"
    setup = " ".join(spec["setup_commands"])
    assert f"torch=={makefile_version('TORCH_VERSION')}" in setup
    assert f"deepspeed=={makefile_version('DEEPSPEED_VERSION')}" in setup
    assert "requirements/runtime.txt" in setup


def containers(pod_template: dict) -> list[dict]:
    return pod_template["spec"]["containers"]


def test_raycluster_groups_are_consistent():
    cluster = load("kuberay/raycluster.yaml")
    assert cluster["apiVersion"] == "ray.io/v1" and cluster["kind"] == "RayCluster"
    assert cluster["spec"]["rayVersion"] == pinned("ray")
    head = cluster["spec"]["headGroupSpec"]
    assert head["rayStartParams"]["num-gpus"] == "0"
    assert {p["containerPort"] for p in containers(head["template"])[0]["ports"]} >= {6379, 8265}
    (group,) = cluster["spec"]["workerGroupSpecs"]
    assert group["minReplicas"] <= group["replicas"] <= group["maxReplicas"]
    (worker,) = containers(group["template"])
    gpus = worker["resources"]["limits"]["nvidia.com/gpu"]
    assert gpus == group["rayStartParams"]["num-gpus"] == worker["resources"]["requests"]["nvidia.com/gpu"]
    assert group["maxReplicas"] * int(gpus) >= max_train_workers()
    claim = load("kuberay/shared-storage.yaml")
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]
    for template in (head["template"], group["template"]):
        for container in containers(template):
            assert {"name": "shared", "mountPath": SHARED} in container["volumeMounts"]
            assert container["resources"]["requests"] == container["resources"]["limits"]
        volumes = {v["name"]: v for v in template["spec"]["volumes"]}
        assert volumes["shared"]["persistentVolumeClaim"]["claimName"] == claim["metadata"]["name"]


def test_every_pod_runs_the_project_image_built_on_the_pinned_ray():
    images = {c["image"] for c in containers(load("kuberay/raycluster.yaml")["spec"]["headGroupSpec"]["template"])}
    for group in load("kuberay/raycluster.yaml")["spec"]["workerGroupSpecs"]:
        images |= {c["image"] for c in containers(group["template"])}
    images |= {c["image"] for c in containers(load("kuberay/rayjob.yaml")["spec"]["submitterPodTemplate"])}
    assert len(images) == 1
    base = re.search(r"^FROM (\S+)", (CLUSTER / "Dockerfile").read_text(), re.M).group(1)
    assert base == f"rayproject/ray:{pinned('ray')}-{PYTHON_TAG}-gpu"


def test_rayjob_runs_a_valid_pipeline_command_on_the_shared_volume():
    job = load("kuberay/rayjob.yaml")
    assert job["apiVersion"] == "ray.io/v1" and job["kind"] == "RayJob"
    assert job["spec"]["clusterSelector"]["ray.io/cluster"] == load("kuberay/raycluster.yaml")["metadata"]["name"]
    argv = shlex.split(job["spec"]["entrypoint"])
    assert argv[:3] == ["python", "-m", "pipeline.cli"]
    args = build_parser().parse_args(argv[3:])
    assert args.command == "run"
    cfg = load_config(ROOT / args.config, args.override)  # the config and overrides validate
    assert cfg.workdir.startswith(SHARED + "/") and cfg.ray.address == "auto"
    runtime_env = yaml.safe_load(job["spec"]["runtimeEnvYAML"])
    assert runtime_env["working_dir"] == "/home/ray/pretrain-pipeline"
    assert "WORKDIR /home/ray/pretrain-pipeline" in (CLUSTER / "Dockerfile").read_text()


@pytest.mark.parametrize("name", ["ray-cluster.yaml", "kuberay/raycluster.yaml", "kuberay/rayjob.yaml",
                                  "kuberay/shared-storage.yaml", "Dockerfile"])
def test_each_definition_is_documented(name):
    assert f"`{name}`" in (CLUSTER / "README.md").read_text()
