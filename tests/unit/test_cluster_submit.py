"""Building a Ray Job without a cluster: entrypoint, runtime_env, secrets, the workdir
check, address handling, and the errors for an unreachable cluster (nothing written)."""

from __future__ import annotations

import shlex

import pytest

from cluster.cli import main
from cluster.connection import check_reachable, dashboard_url, is_local_address
from cluster.errors import ClusterError
from cluster.storage import filesystem_type, is_shared_storage
from cluster.submit import PROJECT_ROOT, Submission, prepare

CONFIG = "configs/gpt-tiny.yaml"
REMOTE = "http://10.255.255.1:8265"  # never contacted: prepare() uses no network


def test_job_runs_the_same_driver_with_absolute_paths(tmp_path, monkeypatch):
    monkeypatch.setenv("DATA_DIR", str(tmp_path))  # the config's ${DATA_DIR:-...}
    job = prepare(Submission(CONFIG, "http://127.0.0.1:8265", [f"workdir={tmp_path}/w"]))
    argv = shlex.split(job.entrypoint)
    assert argv[:5] == ["python", "-m", "pipeline.cli", "run", CONFIG]
    overrides = [argv[i + 1] for i, a in enumerate(argv) if a == "-o"]
    assert overrides == [f"workdir={tmp_path}/w", f"workdir={tmp_path}/w", "ray.address=auto",
                         f"data_dir={tmp_path}"]
    assert job.runtime_env["working_dir"] == str(PROJECT_ROOT)
    assert {".venv", "runs", ".git"} <= set(job.runtime_env["excludes"])
    assert job.submission_id.startswith("pretrain-gpt-tiny-")


def test_secrets_travel_as_env_vars_and_nowhere_else(tmp_path):
    environ = {"WANDB_API_KEY": "s3cr3t", "MY_TOKEN": "t0k3n", "UNRELATED": "x"}
    job = prepare(Submission(CONFIG, "http://127.0.0.1:8265", [f"workdir={tmp_path}"],
                             extra_env=["MY_TOKEN"]), environ=environ)
    assert job.runtime_env["env_vars"]["WANDB_API_KEY"] == "s3cr3t"
    assert job.runtime_env["env_vars"]["MY_TOKEN"] == "t0k3n"
    assert "UNRELATED" not in job.runtime_env["env_vars"]
    assert job.passed_env == ["WANDB_API_KEY", "MY_TOKEN"]
    visible = job.entrypoint + repr(job.metadata) + job.submission_id
    assert "s3cr3t" not in visible and "t0k3n" not in visible


def test_a_local_workdir_is_refused_for_a_remote_cluster(tmp_path):
    with pytest.raises(ClusterError, match="local disk.*--force-local-workdir") as error:
        prepare(Submission(CONFIG, REMOTE, [f"workdir={tmp_path}"]), environ={})
    assert error.value.exit_code == 2
    forced = prepare(Submission(CONFIG, REMOTE, [f"workdir={tmp_path}"], force_local_workdir=True), environ={})
    assert f"workdir={tmp_path}" in forced.entrypoint


def test_network_filesystems_and_urls_count_as_shared(tmp_path):
    mounts = tmp_path / "mounts"
    mounts.write_text("/dev/sda1 / ext4 rw 0 0\n"
                      "fs-1.efs.amazonaws.com:/ /mnt/shared nfs4 rw 0 0\n")
    assert filesystem_type(tmp_path / "x", mounts) == "ext4"
    assert is_shared_storage("/mnt/shared/runs/gpt", mounts)
    assert not is_shared_storage("/mnt/sharedness/runs", mounts)
    assert is_shared_storage("s3://bucket/runs/gpt", mounts)


def test_config_outside_the_project_is_refused(tmp_path):
    outside = tmp_path / "mine.yaml"
    outside.write_text((PROJECT_ROOT / CONFIG).read_text())
    with pytest.raises(ClusterError, match="outside the project"):
        prepare(Submission(str(outside), "http://127.0.0.1:8265"), environ={})


def test_a_config_mistake_is_a_usage_error(tmp_path):
    with pytest.raises(ClusterError, match="pretrain.max_stepz") as error:
        prepare(Submission(CONFIG, "http://127.0.0.1:8265", ["pretrain.max_stepz=3"]), environ={})
    assert error.value.exit_code == 2


def test_addresses_are_normalised_to_the_dashboard_url():
    assert dashboard_url("head") == "http://head:8265"
    assert dashboard_url("http://head:9000") == "http://head:9000"
    assert is_local_address("127.0.0.1:8265") and not is_local_address(REMOTE)
    with pytest.raises(ClusterError, match="not a ray:// client address"):
        dashboard_url("ray://head:10001")


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_unreachable_cluster_is_a_clear_error_and_writes_nothing(tmp_path, capsys):
    address = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(ClusterError, match="cannot reach the Ray dashboard"):
        check_reachable(address)
    workdir = tmp_path / "w"
    assert main(["submit", CONFIG, "--address", address, "-o", f"workdir={workdir}"]) == 1
    err = capsys.readouterr().err
    assert f"cannot reach the Ray dashboard at {address}" in err
    assert not workdir.exists()
    for command in (["jobs"], ["logs", "some-job"], ["stop", "some-job"]):
        assert main([*command, "--address", address]) == 1
