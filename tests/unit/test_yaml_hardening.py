"""The hardened YAML reader (stages.yaml_lines) in process: hostile task specs are refused
like hostile configs, and ordinary anchors and merge keys still load, with their lines."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.config import ConfigError, load_config, parse_override
from stages.evaluate.spec import SpecError, load_task_spec
from stages.yaml_lines import MAX_ALIAS_EXPANSION, YamlInputError, load_yaml_with_lines, parse_yaml
from tests.unit.test_cli_input_errors import ALIAS_BOMB

MINIMAL = "name: t\ningest:\n  sources:\n    - path: corpus/*.txt\n"


def test_anchors_and_merge_keys_still_load_with_their_lines(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("base: &base\n  lr: 0.1\n  steps: 3\nother:\n  <<: *base\n  steps: 5\nlist: [*base, *base]\n")
    data, lines = load_yaml_with_lines(path)
    assert data == {"base": {"lr": 0.1, "steps": 3}, "other": {"lr": 0.1, "steps": 5},
                    "list": [{"lr": 0.1, "steps": 3}] * 2}
    assert lines[("other", "steps")] == 6 and lines[("other", "lr")] == 2  # a merged key: its anchor's line


def test_aliases_may_add_up_to_the_limit_and_not_one_node_more():
    # A list of `count` aliases to a 9-node mapping adds 9 * count nodes to the document.
    anchored = "a: &a {k1: 1, k2: 2, k3: 3, k4: 4}\n"
    def aliases(count: int) -> str:
        return anchored + "b: [" + ", ".join(["*a"] * count) + "]\n"
    fits = MAX_ALIAS_EXPANSION // 9
    assert len(parse_yaml(aliases(fits), "f")[0]["b"]) == fits
    with pytest.raises(YamlInputError, match=r"^f:\d: aliases expand this node to .* \(an alias bomb\?\)"):
        parse_yaml(aliases(fits + 1), "f")


def test_a_hostile_task_spec_is_refused_naming_the_file(tmp_path):
    spec = tmp_path / "task.yaml"
    spec.write_text("name: t\nkind: multiple_choice\n" + ALIAS_BOMB)
    with pytest.raises(SpecError, match=rf"^{spec}:\d+: aliases expand"):
        load_task_spec(spec)
    spec.write_text("name: &n [*n]\n")
    with pytest.raises(SpecError, match=rf"^{spec}:1: alias \*n is inside its own anchor &n"):
        load_task_spec(spec)


def test_a_deeply_nested_document_is_an_error_not_a_crash(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(MINIMAL + "report: " + "[" * 5000 + "]" * 5000 + "\n")
    with pytest.raises(ConfigError, match=rf"^{path}: not valid YAML: nested too deeply"):
        load_config(path)


def test_parse_override_reads_values_as_yaml_and_names_the_flag():
    assert parse_override("pretrain.lr=[1e-3, 3.0e-3]") == (("pretrain", "lr"), ["1e-3", 3.0e-3])
    assert parse_override("sweep=") == (("sweep",), None)
    with pytest.raises(ConfigError, match=r"^-o 'pretrain\.lr=\[1e-3': not valid YAML"):
        parse_override("pretrain.lr=[1e-3")
    with pytest.raises(ConfigError, match=r"^-o pretrain\.\.lr=1: an override must look like section\.key=value"):
        parse_override("pretrain..lr=1")


def test_a_windows_drive_is_a_path_not_a_url(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "c.yaml"
    path.write_text(MINIMAL)
    assert load_config(path, ["workdir=C:/runs/x"]).workdir_url is None
    assert load_config(path, ["workdir=./s3:/bucket/x"]).workdir_url is None  # asked for explicitly
