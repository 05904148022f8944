"""Config loading: errors name file, line, key and the fix; every shipped YAML validates."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.config import ConfigError, load_config

REPO_ROOT = Path(__file__).resolve().parents[2]
MINIMAL = "name: t\ningest:\n  sources:\n    - path: corpus/*.txt\n"


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "c.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize("config", sorted((REPO_ROOT / "configs").glob("*.yaml")), ids=lambda p: p.name)
def test_every_shipped_config_validates(config, monkeypatch):
    monkeypatch.setenv("DATA_DIR", "/data")
    cfg = load_config(config)
    assert cfg.name == config.stem


def test_unknown_key_names_file_line_and_closest_key(tmp_path):
    path = write(tmp_path, MINIMAL + "pretrain:\n  model:\n    num_layer: 3\n")
    with pytest.raises(ConfigError) as error:
        load_config(path)
    assert f"{path}:7: unknown key 'pretrain.model.num_layer'; did you mean 'pretrain.model.num_layers'?" \
        in str(error.value)


def test_unknown_key_in_a_list_item(tmp_path):
    path = write(tmp_path, "name: t\ningest:\n  sources:\n    - path: a\n      fromat: text\n")
    with pytest.raises(ConfigError, match=r":5: unknown key 'ingest.sources\[0\].fromat'; did you mean"):
        load_config(path)


def test_unknown_section_without_a_close_match_lists_valid_keys(tmp_path):
    with pytest.raises(ConfigError, match="unknown key 'zzz'; valid keys here: .*pretrain"):
        load_config(write(tmp_path, MINIMAL + "zzz: 1\n"))


def test_bad_value_names_the_key(tmp_path):
    with pytest.raises(ConfigError, match=r":6: 'pretrain.max_steps': .*greater than or equal to 1"):
        load_config(write(tmp_path, MINIMAL + "pretrain:\n  max_steps: 0\n"))


def test_missing_required_section(tmp_path):
    with pytest.raises(ConfigError, match="required key 'ingest' is missing"):
        load_config(write(tmp_path, "name: t\n"))


def test_overrides_apply_before_validation_and_errors_name_the_flag(tmp_path):
    path = write(tmp_path, MINIMAL)
    cfg = load_config(path, ["pretrain.max_steps=7", "pretrain.model.num_layers=3"])
    assert cfg.pretrain.max_steps == 7 and cfg.pretrain.model.num_layers == 3
    with pytest.raises(ConfigError, match=r"-o pretrain.lrr=1: unknown key 'pretrain.lrr'; did you mean 'pretrain.lr'"):
        load_config(path, ["pretrain.lrr=1"])
    with pytest.raises(ConfigError, match="must look like section.key=value"):
        load_config(path, ["pretrain.lr"])


def test_environment_interpolation(tmp_path, monkeypatch):
    path = write(tmp_path, MINIMAL + "data_dir: ${MY_DATA}/x\nworkdir: ${MY_WORK:-/tmp/w}\n")
    monkeypatch.setenv("MY_DATA", "/d")
    cfg = load_config(path)
    assert cfg.data_dir == "/d/x" and cfg.workdir == "/tmp/w"
    monkeypatch.delenv("MY_DATA")
    with pytest.raises(ConfigError, match=r":5: environment variable \$\{MY_DATA\} in 'data_dir' is not set"):
        load_config(path)


def test_invalid_yaml_and_missing_file(tmp_path):
    with pytest.raises(ConfigError, match=r"c.yaml:2: not valid YAML"):
        load_config(write(tmp_path, "name: t\n  bad: [\n"))
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.yaml")
