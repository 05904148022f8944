"""Bad and hostile input through the real `pretrain` CLI: each is one `error:` line on
stderr naming the flag or file:line, exit 2, and no traceback; none of it starts Ray.

- a malformed `-o` value, for run, plan and sweep;
- a config file that is not UTF-8;
- hostile YAML: an alias inside its own anchor, an alias bomb, a `!!python/...` tag;
- an object-store URL with a slash missing (`s3:/bucket/x`), as workdir or store.

And `pretrain plan` writes nothing: not on a fresh workdir, not on a finished one whose
input files changed (the input-hash cache is persisted by `run` only).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.e2e.cli import pretrain_cli
from tests.unit.test_engine import FakeStages, run

# The "billion laughs": 0.3 kB that a naive loader expands to 9**9 list items.
ALIAS_BOMB = "a: &a [x,x,x,x,x,x,x,x,x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{','.join([f'*{chr(97 + i)}'] * 9)}]\n" for i in range(8))


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    (tmp_path / "data" / "corpus").mkdir(parents=True)
    (tmp_path / "data" / "corpus" / "a.txt").write_text("One small book.\n\nTwo paragraphs.\n")
    return tmp_path / "data"


@pytest.fixture
def config_file(tmp_path: Path, data_dir: Path) -> Path:
    path = tmp_path / "experiment.yaml"
    path.write_text(f"name: unit\nworkdir: {tmp_path / 'work'}\ndata_dir: {data_dir}\n"
                    "ingest:\n  sources:\n    - path: corpus/*.txt\n")
    return path


def refused(*args: str) -> str:
    """Run the CLI, check it refused the input properly, return the error line."""
    result = pretrain_cli(*args, timeout=120)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


@pytest.mark.parametrize("command", [["run"], ["plan"], ["sweep"], ["sweep", "--plan"]])
def test_a_malformed_override_value_names_the_flag(config_file, command):
    error = refused(*command, str(config_file), "-o", "pretrain.lr=[1e-3")
    assert "-o 'pretrain.lr=[1e-3': not valid YAML: expected ',' or ']'" in error


def test_an_override_value_that_is_not_a_value_names_the_flag(config_file):
    assert "-o 'pretrain.lr=: x': not valid YAML" in refused("plan", str(config_file), "-o", "pretrain.lr=: x")


def test_hostile_yaml_in_an_override_is_refused(config_file):
    error = refused("plan", str(config_file), "-o", "pretrain.lr=&a [*a]")
    assert "-o 'pretrain.lr=&a [*a]': alias *a is inside its own anchor &a" in error


def test_a_config_that_is_not_utf8_names_the_file_and_line(config_file):
    config_file.write_bytes(config_file.read_bytes() + b"report:\n  title: caf\xe9\n")
    error = refused("plan", str(config_file))
    assert f"error: {config_file}:8: not UTF-8 text" in error


def test_an_alias_inside_its_own_anchor_is_refused(config_file):
    with open(config_file, "a") as f:
        f.write("report: &r {extra: *r}\n")
    error = refused("plan", str(config_file))
    assert f"error: {config_file}:7: alias *r is inside its own anchor &r" in error


def test_an_alias_bomb_is_refused_before_it_expands(config_file):
    with open(config_file, "a") as f:
        f.write(ALIAS_BOMB)
    error = refused("plan", str(config_file))
    assert f"error: {config_file}:" in error and "an alias bomb?" in error


def test_a_python_tag_is_refused_naming_the_line(config_file):
    with open(config_file, "a") as f:
        f.write("seed: !!python/object/apply:os.getpid []\n")
    error = refused("plan", str(config_file))
    assert f"error: {config_file}:7: not valid YAML: could not determine a constructor" in error


@pytest.mark.parametrize("key, value, meant", [("workdir", "s3:/bucket/x", "s3://bucket/x"),
                                               ("store", "gs:/bucket", "gs://bucket"),
                                               ("workdir", "s3:bucket/x", "s3://bucket/x")])
def test_a_url_with_a_slash_missing_is_refused_naming_the_key(config_file, key, value, meant):
    error = refused("plan", str(config_file), "-o", f"{key}={value}")
    assert f"'{key}': a slash missing? write {meant} for the object store" in error


def test_a_url_with_a_slash_missing_in_the_file_names_its_line(config_file):
    with open(config_file, "a") as f:
        f.write("store: s3:/bucket/x\n")
    assert f"{config_file}:7: 'store': a slash missing? write s3://bucket/x" in refused("plan", str(config_file))


def test_plan_on_a_fresh_workdir_writes_nothing(config_file, tmp_path):
    result = pretrain_cli("plan", str(config_file), timeout=120)
    assert result.returncode == 0, result.stderr
    assert "ingest     run" in result.stdout
    assert not (tmp_path / "work").exists()


def test_plan_on_a_finished_workdir_writes_nothing(config_file, data_dir, tmp_path):
    run(config_file, FakeStages())  # the engine without Ray: a finished workdir with its hash cache
    corpus_file = data_dir / "corpus" / "a.txt"
    stat = corpus_file.stat()  # touched: the plan re-hashes it, and must keep the digest to itself
    os.utime(corpus_file, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    before = _snapshot(tmp_path / "work")
    result = pretrain_cli("plan", str(config_file), timeout=120)
    assert result.returncode == 0, result.stderr
    assert "finished with this fingerprint" in result.stdout
    assert _snapshot(tmp_path / "work") == before


def _snapshot(root: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*")}
