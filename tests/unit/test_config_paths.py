"""Paths in the config that cannot work are refused when the config is checked (exit 2,
`error:` naming the key), not when a stage starts: a pretrain.deepspeed_config file that
does not exist, and a malformed object-store URL as the workdir (submit refuses it the same
way). A well-formed URL is accepted: the run is staged in a local mirror of it, never in a
./s3: folder, and submit counts it as shared storage."""

from __future__ import annotations

import pytest

from cluster.errors import ClusterError
from cluster.submit import PROJECT_ROOT, Submission, prepare
from cluster.cli import main
from pipeline.config import ConfigError, load_config

CONFIG = str(PROJECT_ROOT / "configs/gpt-tiny.yaml")


def test_a_missing_deepspeed_json_is_a_config_error(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # relative paths are taken from the working directory
    with pytest.raises(ConfigError, match=r"-o pretrain\.deepspeed_config=ds\.json: "
                                          r"'pretrain\.deepspeed_config': .*ds\.json does not exist "
                                          rf"\(a relative path is taken from .*{tmp_path}\)"):
        load_config(CONFIG, ["pretrain.deepspeed_config=ds.json"])
    assert main(["plan", CONFIG, "-o", f"workdir={tmp_path}/w",
                 "-o", "pretrain.deepspeed_config=ds.json"]) == 2
    assert capsys.readouterr().err.startswith("error: ")

    (tmp_path / "ds.json").write_text("{}")
    assert load_config(CONFIG, ["pretrain.deepspeed_config=ds.json"]).pretrain.deepspeed_config == "ds.json"


@pytest.mark.parametrize("url", ["s3://bucket/runs/x", "gs://bucket/x"])
def test_an_object_store_workdir_is_accepted_and_staged_in_a_local_mirror(tmp_path, monkeypatch, url):
    from storage.mirror import mirror_dir

    cwd, mirror = tmp_path / "cwd", tmp_path / "mirror"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    monkeypatch.setenv("PRETRAIN_MIRROR", str(mirror))
    cfg = load_config(CONFIG, [f"workdir={url}/"])
    assert cfg.workdir == cfg.workdir_url == cfg.store_url == cfg.store_location == url
    assert cfg.resolved_workdir == cfg.resolved_store == mirror_dir(url)
    assert cfg.resolved_workdir.parent == mirror and cfg.resolved_workdir.name.startswith(url.rsplit("/", 1)[-1])
    assert mirror_dir(url + "-other") != mirror_dir(url)  # one mirror per prefix
    assert not list(cwd.iterdir())  # no ./s3:/bucket/... folder
    # A separate store (a sweep's) may be a URL while the run's index stays a local folder.
    both = load_config(CONFIG, [f"workdir={tmp_path}/w", f"store={url}"])
    assert both.workdir_url is None and both.store_url == url and both.resolved_workdir == tmp_path / "w"


@pytest.mark.parametrize("key", ["workdir", "store"])
@pytest.mark.parametrize("url", ["s3://", "://x", "s3:///", "s 3://bucket/x"])
def test_a_malformed_object_store_url_is_refused_naming_the_key(tmp_path, monkeypatch, capsys, key, url):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=rf"-o {key}=.*: '{key}': .* is neither a path nor an "
                                          r"object-store URL such as s3://bucket/prefix"):
        load_config(CONFIG, [f"{key}={url}"])
    assert main(["plan", CONFIG, "-o", f"{key}={url}"]) == 2
    assert f"error: -o {key}=" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())
    with pytest.raises(ClusterError, match=rf"'{key}': .* is neither a path nor an object-store URL") as error:
        prepare(Submission(CONFIG, "http://10.255.255.1:8265", [f"{key}={url}"]), environ={})
    assert error.value.exit_code == 2


def test_submit_takes_an_object_store_workdir_as_shared_and_passes_the_endpoint_unprinted(tmp_path, monkeypatch):
    from cluster.submit import _without_secrets

    monkeypatch.chdir(tmp_path)
    url = "s3://bucket/runs/x"
    environ = {"AWS_ACCESS_KEY_ID": "AKIDSECRETID", "AWS_SECRET_ACCESS_KEY": "s3cr3t-k3y",
               "AWS_ENDPOINT_URL": "http://minio.internal:9000", "AWS_REGION": "eu-west-1"}
    job = prepare(Submission(CONFIG, "http://10.255.255.1:8265", [f"workdir={url}"]), environ=environ)
    assert job.workdir == url and f"-o workdir={url} -o ray.address=auto" in job.entrypoint
    assert job.runtime_env["env_vars"]["AWS_ENDPOINT_URL"] == "http://minio.internal:9000"
    assert {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL", "AWS_REGION"} <= set(job.passed_env)
    visible = job.entrypoint + repr(job.metadata) + job.submission_id
    for value in environ.values():
        assert value not in visible
    refused = _without_secrets("403 from http://minio.internal:9000 for AKIDSECRETID/s3cr3t-k3y", job)
    assert refused == "403 from <AWS_ENDPOINT_URL> for <AWS_ACCESS_KEY_ID>/<AWS_SECRET_ACCESS_KEY>"
    assert not list(tmp_path.iterdir())
