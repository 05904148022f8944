"""pretrain.eval_tasks / eval_tasks_* / snapshot_every: validated when the config loads, so a
misspelled task is a config error (exit 2) naming the key, not a crash mid-training; and
the task files join the pretrain stage's fingerprint only when eval_tasks are set."""

from __future__ import annotations

from pathlib import Path

import pytest

from cluster.cli import main
from pipeline.config import ConfigError, load_config
from stages.pretrain.config import PretrainConfig
from stages.pretrain.inputs import input_files

MINIMAL = "name: t\ningest:\n  sources:\n    - path: corpus/*.txt\n"


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "c.yaml"
    path.write_text(MINIMAL + text)
    return path


def test_defaults_change_nothing():
    cfg = PretrainConfig()
    assert cfg.eval_tasks == [] and cfg.eval_tasks_max_examples == 64 and cfg.eval_tasks_shots == 0
    assert cfg.snapshot_every is None


def test_builtin_names_and_spec_paths_are_accepted(tmp_path):
    spec = Path(__file__).resolve().parents[2] / "stages" / "evaluate" / "tasks" / "copa.yaml"
    cfg = load_config(write(tmp_path, f"pretrain:\n  eval_tasks: [lambada_openai, {spec}]\n"
                                      "  eval_tasks_shots: 2\n  snapshot_every: 100\n"))
    assert cfg.pretrain.eval_tasks == ["lambada_openai", str(spec)]
    assert cfg.pretrain.snapshot_every == 100


def test_a_misspelled_task_names_the_key_line_and_the_closest_task(tmp_path):
    path = write(tmp_path, "pretrain:\n  eval_tasks: [lambada]\n")
    with pytest.raises(ConfigError, match=r"c.yaml:6: 'pretrain.eval_tasks': .*no built-in evaluation task "
                                          r"'lambada'; did you mean 'lambada_openai'\?"):
        load_config(path)


def test_the_cli_exits_2_on_a_misspelled_task(tmp_path, capsys):
    path = write(tmp_path, "pretrain:\n  eval_tasks: [piqaa]\n")
    assert main(["plan", str(path)]) == 2
    assert "pretrain.eval_tasks" in capsys.readouterr().err


def test_a_missing_spec_file_and_a_repeated_task_are_refused(tmp_path):
    with pytest.raises(ConfigError, match=r"'pretrain.eval_tasks': .*task spec nope.yaml does not exist"):
        load_config(write(tmp_path, "pretrain:\n  eval_tasks: [nope.yaml]\n"))
    with pytest.raises(ConfigError, match="a task is listed twice"):
        load_config(write(tmp_path, "pretrain:\n  eval_tasks: [copa, copa]\n"))


def test_bert_cannot_score_generation_tasks():
    with pytest.raises(ValueError, match="pretrain.eval_tasks: squad generate text, which a BERT model cannot do"):
        PretrainConfig(model={"family": "bert"}, eval_tasks=["squad"])
    PretrainConfig(model={"family": "gpt"}, eval_tasks=["squad"])


@pytest.mark.parametrize("key, value", [("snapshot_every", 0), ("eval_tasks_max_examples", 0),
                                        ("eval_tasks_shots", -1)])
def test_counts_must_be_positive(tmp_path, key, value):
    with pytest.raises(ConfigError, match=rf"'pretrain.{key}': .*greater than or equal to"):
        load_config(write(tmp_path, f"pretrain:\n  {key}: {value}\n"))


def test_task_files_join_the_fingerprint_only_when_tasks_are_set(tmp_path):
    assert input_files(load_config(write(tmp_path, ""))) == {}
    cfg = load_config(write(tmp_path, f"data_dir: {tmp_path}\npretrain:\n  eval_tasks: [lambada_openai]\n"))
    files = input_files(cfg)
    assert files["pretrain.eval_tasks/lambada_openai.yaml"].endswith("stages/evaluate/tasks/lambada_openai.yaml")
    assert files["eval/lambada/lambada_test.jsonl"] == str(tmp_path / "eval/lambada/lambada_test.jsonl")
