"""Building a Ray Job without a cluster: entrypoint, runtime_env, secrets, the workdir
check, address handling, and the errors for an unreachable cluster (nothing written);
a sweep (a `sweep:` section or an -o axis) as one `pretrain sweep` job, every point
validated before anything is sent."""

from __future__ import annotations

import shlex

import pytest

from cluster.cli import main
from cluster.connection import check_reachable, dashboard_url, is_local_address
from cluster.errors import ClusterError
from cluster.submit import PROJECT_ROOT, Submission, prepare
from storage.mounts import filesystem_type, is_shared_storage

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


def entrypoint_overrides(argv: list[str]) -> list[str]:
    return [argv[i + 1] for i, a in enumerate(argv) if a == "-o"]


def test_an_axis_override_submits_a_sweep_whose_points_join_the_jobs_cluster(tmp_path, monkeypatch):
    monkeypatch.setenv("DATA_DIR", str(tmp_path))
    axis = "pretrain.lr=[1e-3,3e-3]"
    job = prepare(Submission(CONFIG, "http://127.0.0.1:8265", [f"workdir={tmp_path}/sweep", axis],
                             max_concurrent=3), environ={"WANDB_API_KEY": "s3cr3t"})
    argv = shlex.split(job.entrypoint)
    assert argv[:5] == ["python", "-m", "cluster.cli", "sweep", CONFIG]
    assert entrypoint_overrides(argv) == [f"workdir={tmp_path}/sweep", axis, f"workdir={tmp_path}/sweep",
                                          "ray.address=auto", f"data_dir={tmp_path}"]
    assert argv[-2:] == ["--max-concurrent", "3"]
    assert job.workdir == f"{tmp_path}/sweep"  # the sweep root
    assert job.num_points == 2
    assert job.metadata == {"experiment": "gpt-tiny", "config": CONFIG, "workdir": f"{tmp_path}/sweep",
                            "sweep": "true", "points": "2"}
    assert all(isinstance(v, str) for v in job.metadata.values())  # Ray's job metadata is str -> str
    assert job.submission_id.startswith("pretrain-gpt-tiny-")
    assert job.runtime_env["env_vars"]["WANDB_API_KEY"] == "s3cr3t" and "s3cr3t" not in job.entrypoint


def test_a_sweep_section_is_submitted_as_a_sweep_and_switched_off_as_one_run(tmp_path, monkeypatch):
    # Only files inside the project travel with the job: make tmp_path the project.
    monkeypatch.setattr("cluster.submit.PROJECT_ROOT", tmp_path)
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "grid.yaml").write_text(
        (PROJECT_ROOT / CONFIG).read_text() + f"data_dir: {tmp_path}\n"
        "sweep:\n  grid:\n    pretrain.model.hidden_size: [32, 64]\n    seed: [0, 1, 2]\n")
    config = str(tmp_path / "configs" / "grid.yaml")
    job = prepare(Submission(config, "http://127.0.0.1:8265", [f"workdir={tmp_path}/w"]), environ={})
    argv = shlex.split(job.entrypoint)
    assert argv[:5] == ["python", "-m", "cluster.cli", "sweep", "configs/grid.yaml"]
    assert "--max-concurrent" not in argv
    assert job.num_points == 6 and job.metadata["points"] == "6"

    single = prepare(Submission(config, "http://127.0.0.1:8265", [f"workdir={tmp_path}/w", "sweep="]), environ={})
    assert shlex.split(single.entrypoint)[3] == "run"
    assert single.num_points is None and "sweep" not in single.metadata


def test_a_list_for_a_list_valued_key_is_one_run_and_a_list_of_lists_a_sweep(tmp_path):
    one_run = prepare(Submission(CONFIG, "http://127.0.0.1:8265",
                                 [f"workdir={tmp_path}", "finetune.tasks=[sst2,cola]"]), environ={})
    assert shlex.split(one_run.entrypoint)[3] == "run"
    assert one_run.config.finetune.tasks == ["sst2", "cola"]
    sweep = prepare(Submission(CONFIG, "http://127.0.0.1:8265",
                               [f"workdir={tmp_path}", "finetune.tasks=[[sst2],[cola]]"]), environ={})
    assert shlex.split(sweep.entrypoint)[3] == "sweep" and sweep.num_points == 2


def test_the_resource_check_of_a_sweep_uses_its_most_demanding_point(tmp_path):
    job = prepare(Submission(CONFIG, "http://127.0.0.1:8265",
                             [f"workdir={tmp_path}", "pretrain.num_workers=[1,3]", "finetune.num_workers=1"]),
                  environ={})
    assert job.config.pretrain.num_workers == 3
    assert job.config.name == "gpt-tiny-num_workers-3"


def test_a_bad_sweep_point_is_refused_before_anything_is_sent(tmp_path, monkeypatch, capsys):
    def no_network(*args, **kwargs):
        raise AssertionError("a refused sweep must not contact the cluster")

    monkeypatch.setattr("cluster.submit.connect", no_network)
    monkeypatch.setattr("cluster.submit.check_fits", no_network)
    argv = ["submit", CONFIG, "--address", REMOTE, "-o", f"workdir={tmp_path}/w", "--force-local-workdir"]
    assert main([*argv, "-o", "pretrain.lr=[1e-3,-1]"]) == 2
    assert "sweep point pretrain.lr=-1" in capsys.readouterr().err
    assert main([*argv, "-o", "pretrain.lrr=[1e-3,3e-3]"]) == 2
    assert "did you mean 'pretrain.lr'" in capsys.readouterr().err
    assert main([*argv, "-o", "workdir=[a,b]"]) == 2
    assert "'workdir' cannot vary in a sweep" in capsys.readouterr().err
    assert not (tmp_path / "w").exists()


def test_max_concurrent_is_for_sweeps_and_at_least_one(tmp_path, capsys):
    assert main(["submit", CONFIG, "--address", REMOTE, "-o", f"workdir={tmp_path}", "--force-local-workdir",
                 "--max-concurrent", "2"]) == 2
    assert "--max-concurrent is for sweeps" in capsys.readouterr().err
    with pytest.raises(ClusterError, match="--max-concurrent 0: give 1 or more") as error:
        prepare(Submission(CONFIG, "http://127.0.0.1:8265", [f"workdir={tmp_path}", "seed=[0,1]"],
                           max_concurrent=0), environ={})
    assert error.value.exit_code == 2


def test_a_data_dir_axis_is_not_pinned_by_the_resolved_data_dir(tmp_path):
    axis = f"data_dir=[{tmp_path}/a,{tmp_path}/b]"
    job = prepare(Submission(CONFIG, "http://127.0.0.1:8265", [f"workdir={tmp_path}/w", axis]), environ={})
    assert entrypoint_overrides(shlex.split(job.entrypoint)) == [
        f"workdir={tmp_path}/w", axis, f"workdir={tmp_path}/w", "ray.address=auto"]
    assert job.num_points == 2
