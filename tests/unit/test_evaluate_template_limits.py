"""A task spec's templates are parsed, never run, while a config is validated (`pretrain
plan` included); at run time a template that runs too long on a row is stopped with an
error naming the spec file and key. The hostile template is a constant argument to a
regex that backtracks catastrophically: Jinja folds constant expressions when it
compiles, so compiling it used to run it (hours for 40 a's)."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from stages.evaluate import templates
from stages.evaluate.prompts import doc_text
from stages.evaluate.spec import SpecError, load_task_spec
from stages.evaluate.templates import TemplateRowError
from stages.evaluate.time_limit import TimeLimitExceeded, time_limit
from tests.e2e.cli import pretrain_cli

BACKTRACKS = "'(a+)+$'"  # on "aaa...a!": every split of the a's is tried before failing
CONSTANT_BOMB = "{{ '" + "a" * 40 + "!' | regex_replace(" + BACKTRACKS + ", '') }}"


def write_spec(folder: Path, doc_to_text: str) -> Path:
    path = folder / "hostile.yaml"
    path.write_text(
        "name: hostile\nkind: cloze\n"
        "splits:\n  validation: {path: eval/superglue/COPA/val.jsonl, format: jsonl}\n"
        "eval_split: validation\n"
        f"doc_to_text: \"{doc_to_text}\"\n"
        "doc_to_target: \"{{ ' ' ~ choice1 }}\"\nmetrics: [acc]\n", encoding="utf-8")
    return path


def test_plan_validates_a_spec_without_running_its_templates(tmp_path):
    spec = write_spec(tmp_path, CONSTANT_BOMB)
    result = pretrain_cli("plan", "configs/gpt-tiny.yaml", "-o", f"workdir={tmp_path / 'run'}",
                          "-o", f"evaluate.tasks=[{spec}]", "-o", "evaluate.shots={}", timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "evaluate" in result.stdout


def test_validation_still_names_an_unknown_filter_with_its_line(tmp_path):
    with pytest.raises(SpecError) as error:
        load_task_spec(write_spec(tmp_path, "{{ premise | no_such_filter }}"))
    message = str(error.value)
    assert "hostile.yaml:6: 'doc_to_text' is not a valid Jinja2 template: no filter named 'no_such_filter'" \
        in message


@pytest.mark.parametrize("template", [
    CONSTANT_BOMB,  # folded when compiled: the compile is under the limit too
    "{{ premise | regex_replace(" + BACKTRACKS + ", '') }}",  # the row's own text backtracks
])
def test_a_template_running_too_long_on_a_row_is_stopped_naming_spec_and_key(tmp_path, monkeypatch, template):
    monkeypatch.setattr(templates, "RENDER_SECONDS", 0.5)
    spec = load_task_spec(write_spec(tmp_path, template))
    row = {"premise": "a" * 40 + "!", "choice1": "x"}
    with pytest.raises(TemplateRowError) as error:
        doc_text(spec, row, "eval/superglue/COPA/val.jsonl:3")
    message = str(error.value)
    assert message.startswith(f"{tmp_path / 'hostile.yaml'}: 'doc_to_text' (")
    assert "ran for more than 0.5 s on the row at eval/superglue/COPA/val.jsonl:3 and was stopped" in message
    assert "regex_replace" in message


def test_an_ordinary_template_renders_under_the_limit(tmp_path):
    spec = load_task_spec(write_spec(tmp_path, "{{ premise | regex_replace('a+', 'b') }}?"))
    assert doc_text(spec, {"premise": "caat", "choice1": "x"}, "here:1") == "cbt?"


def test_the_limit_keeps_an_alarm_set_before_it():
    """pytest-timeout (and anyone else) may have an alarm pending: it must survive."""
    fired = []

    def handler(*_):
        fired.append("earlier")

    earlier = signal.signal(signal.SIGALRM, handler)
    earlier_delay, _ = signal.setitimer(signal.ITIMER_REAL, 300)
    try:
        with pytest.raises(TimeLimitExceeded):
            with time_limit(0.2):
                while True:
                    pass
        delay, _ = signal.getitimer(signal.ITIMER_REAL)
        assert 200 < delay <= 300  # re-armed with what was left of it
        assert signal.getsignal(signal.SIGALRM) is handler and not fired
    finally:
        signal.setitimer(signal.ITIMER_REAL, earlier_delay)
        signal.signal(signal.SIGALRM, earlier)
