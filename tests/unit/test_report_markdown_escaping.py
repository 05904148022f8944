"""report.md (and the comparison's Markdown) show user text as text: a task, experiment
or source name, an error message or a host holding HTML is escaped (a Markdown viewer
renders raw HTML), and a `|` in it does not split its table row. report.html escapes the
same values (tests/unit/test_report.py)."""

from __future__ import annotations

from views.run_source import load_run_source
from views.comparison import build_comparison
from views.comparison_render import comparison_markdown
from stages.report.content import build_report
from stages.report.markdown import render_markdown
from tests.support.synthetic_run import write_run

HOSTILE = "<img src=x onerror=alert(1)>"
SHOWN = "&lt;img src=x onerror=alert(1)&gt;"


def hostile_report(tmp_path) -> dict:
    report = build_report(load_run_source(write_run(tmp_path / "run")))
    report["experiment"] = HOSTILE
    report["evaluation"] = {HOSTILE: report["evaluation"]["copa"], "a|b": report["evaluation"]["piqa"]}
    report["finetune"] = {f"{HOSTILE}/accuracy": 0.5}
    report["finetune_tasks"] = {HOSTILE: {"accuracy": 0.5}}
    report["problems"] = [{"stage": "finetune", "kind": "failed", "message": f"{HOSTILE} & a | b\nline 2"}]
    report["lineage"]["stages"][0]["host"] = HOSTILE
    report["stats"]["ingest"][HOSTILE] = HOSTILE
    report["mixture"] = [{"source": HOSTILE, "weight": 1.0, "train_tokens": 10, "validation_tokens": 1,
                          "loss": 1.0, "val_loss": 1.0}]
    return report


def test_report_md_escapes_every_user_text(tmp_path):
    md = render_markdown(hostile_report(tmp_path))
    assert "<img" not in md
    assert md.startswith(f"# Experiment {SHOWN}\n")
    assert f"| {SHOWN} | 2 | acc |" in md  # the evaluation table
    assert f"| {SHOWN} | accuracy | 0.5000 |" in md  # fine-tuning
    assert f"| finetune | failed | {SHOWN} &amp; a \\| b line 2 |" in md
    assert f"| {SHOWN} | {SHOWN} |" in md  # a statistic
    assert f"| {SHOWN} | 1.000 |" in md  # the data mixture


def test_a_pipe_in_a_task_name_keeps_its_row_whole(tmp_path):
    md = render_markdown(hostile_report(tmp_path))
    row = next(line for line in md.splitlines() if line.startswith("| a\\|b |"))
    header = next(line for line in md.splitlines() if line.startswith("| task | shots |"))
    unescaped_pipes = lambda line: len(line.replace("\\|", "")) - len(line.replace("\\|", "").replace("|", ""))
    assert unescaped_pipes(row) == unescaped_pipes(header)


def test_comparison_md_escapes_run_and_experiment_names(tmp_path):
    first = write_run(tmp_path / "a", name="plain")
    second = write_run(tmp_path / "b", name=HOSTILE.replace("/", ""), lr=0.002)
    md = comparison_markdown(build_comparison([load_run_source(first), load_run_source(second)]))
    assert "<img" not in md and SHOWN.replace("/", "") in md
