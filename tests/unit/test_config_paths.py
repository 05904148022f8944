"""Paths in the config that cannot work are refused when the config is checked (exit 2,
`error:` naming the key), not when a stage starts: a pretrain.deepspeed_config file that
does not exist, and an object-store URL as the workdir (submit refuses it the same way)."""

from __future__ import annotations

import pytest

from cluster.errors import ClusterError
from cluster.submit import PROJECT_ROOT, Submission, prepare
from pipeline.cli import main
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


@pytest.mark.parametrize("url", ["s3://bucket/runs/x", "gs://bucket/x", "file:///tmp/x"])
def test_an_object_store_workdir_is_refused(tmp_path, monkeypatch, capsys, url):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=r"'workdir': .*object-store workdirs .* are not "
                                          r"supported yet.*NFS"):
        load_config(CONFIG, [f"workdir={url}"])
    assert main(["plan", CONFIG, "-o", f"workdir={url}"]) == 2
    assert "error: -o workdir=" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())  # no ./s3:/bucket/... folder

    with pytest.raises(ClusterError, match="object-store workdirs") as error:
        prepare(Submission(CONFIG, "http://10.255.255.1:8265", [f"workdir={url}"]), environ={})
    assert error.value.exit_code == 2
