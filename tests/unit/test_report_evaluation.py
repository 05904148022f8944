"""The evaluate stage's zero- and few-shot scores in the reports: a row per task and metric
with shots, interval, baseline and a verdict that knows perplexity and bits per byte are
better lower (report.md, report.html, metrics.json, the comparison, `pretrain status`),
and the scores across pretraining snapshots as plots and a table."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from views.compare import write_comparison
from views.run_source import load_run_source
from pipeline.status import key_metrics, render
from stages.evaluate.metrics import Score
from stages.evaluate.run import clears_baseline
from stages.report.content import build_report
from stages.report.evaluation import format_number, judge, read_snapshots
from stages.report.run import write_report
from tests.support.synthetic_run import write_run


def evaluate_dir(workdir: Path) -> Path:
    (directory,) = (workdir / "evaluate").iterdir()
    return directory


def report_files(workdir: Path, out: Path) -> tuple[dict, str, str]:
    out.mkdir(parents=True)
    write_report(load_run_source(workdir), out)
    return (json.loads((out / "metrics.json").read_text()), (out / "report.md").read_text(),
            (out / "report.html").read_text())


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> tuple[dict, str, str]:
    """metrics.json, report.md and report.html of the synthetic run (plots take seconds)."""
    root = tmp_path_factory.mktemp("evaluation")
    return report_files(write_run(root / "run"), root / "out")


def section(text: str, start: str, end: str) -> str:
    return text[text.index(start):text.index(end, text.index(start))]


def test_markdown_lists_every_score_with_shots_interval_baseline_and_verdict(written):
    saved, md, _ = written
    md = section(md, "## Evaluation (zero- and few-shot)", "## Pretraining curve")

    assert "| task | shots | metric | value | 95% CI | baseline | vs baseline | examples |" in md
    assert "| lambada_openai | 0 | acc | 0.0250 | 0.0107 – 0.0572 | 0.0000 | above baseline | 200 |" in md
    assert "| piqa | 0 | acc_norm | 0.5500 | 0.4807 – 0.6174 | 0.5000 | **≈ chance** | 200 |" in md
    assert "| copa | 2 | acc | 0.5800 | 0.4821 – 0.6719 | 0.5000 | **≈ chance** | 100 |" in md
    # Below its majority class, and 37 of its 4-shot prompts were cut to fit the context.
    assert "| sst2 | 4 | acc | 0.4150 | 0.3489 – 0.4842 | 0.5400 | **below baseline** | 200 (37 truncated) |" in md
    # Lower is better: 2.1 bits per byte is well under a uniform model's 8.
    assert ("| wikitext2 | 0 | bits_per_byte (lower is better) | 2.1050 | 2.0610 – 2.1530 | 8.0000 | "
            "better than baseline | 62 |") in md
    assert "| lambada_openai | 0 | perplexity (lower is better) | 3519.2 | 2710.4 – 4637.9 | - | - | 200 |" in md
    assert "truncated" not in md.split("| sst2 |")[0], "no truncation column text where nothing was cut"

    assert saved["evaluation"]["wikitext2"]["scores"]["bits_per_byte"] == {
        "value": 2.105, "ci95": [2.061, 2.153], "baseline": 8.0, "baseline_kind": "8: a uniform model over byte values",
        "higher_is_better": False, "verdict": "above", "no_interval": None}
    assert saved["evaluation"]["sst2"]["num_truncated"] == 37 and saved["evaluation"]["copa"]["shots"] == 2
    [problem] = [p for p in saved["problems"] if p["stage"] == "evaluate"]
    assert problem["kind"] == "at chance" and problem["message"].startswith(
        "4 of 7 zero/few-shot scores are not better than their baseline: piqa/acc (≈ chance)")


def test_markdown_lists_scores_across_training(written):
    saved, md, _ = written
    md = section(md, "### Across training", "## Pretraining curve")
    assert "| task | metric | 10 / 20,480 | 20 / 40,960 | 30 / 61,440 | 40 / 81,920 | baseline |" in md
    assert "| wikitext2 | bits_per_byte | 5.2625 | 4.2100 | 3.1575 | 2.1050 | 8.0000 |" in md
    # SST-2 drifts from chance to below its baseline as training goes on.
    assert "| sst2 | acc | 0.5088 *≈* | 0.4775 *≈* | 0.4462 *worse* | 0.4150 *worse* | 0.5400 |" in md
    assert len(saved["evaluation_snapshots"]) == 4 * 10
    assert saved["evaluation_snapshots"][0]["tokens"] == 20480


def test_html_shows_badges_tooltips_and_plots_against_tokens(written):
    _, _, html = written
    evaluation = section(html, '<table class="evaluation">', "</table>")
    assert evaluation.count('class="badge badge-chance"') == 3
    assert evaluation.count('class="badge badge-below">below baseline<') == 1
    assert evaluation.count('class="badge badge-above">better than baseline<') == 2  # byte perplexity, bpb
    assert '<tr class="group"><td colspan="8">sst2 (multiple_choice)</td></tr>' in evaluation
    assert '<span title="chance: mean of 1/n choices">0.5000</span>' in evaluation
    assert "<td class=num>200 (37 truncated)</td>" in evaluation

    images = re.findall(r'<img class="plot" alt="(Evaluation across training[^"]+)" src="data:image/png;base64,', html)
    assert images == ["Evaluation across training: cloze (higher is better)",
                      "Evaluation across training: multiple choice (higher is better)",
                      "Evaluation across training: bits per byte (lower is better)",
                      "Evaluation across training: lambada_openai perplexity (lower is better)",
                      "Evaluation across training: wikitext2 perplexity (lower is better)"]
    assert '<details><summary>Every snapshot' in html and '<table class="evaluation-snapshots">' in html


def test_no_snapshots_no_plots_and_an_unreadable_file_is_a_problem(tmp_path):
    workdir = write_run(tmp_path / "run", snapshots=False)
    _, md, html = report_files(workdir, tmp_path / "out")
    assert "### Across training" not in md and "Evaluation across training" not in html
    assert "| sst2 | 4 | acc |" in md

    (evaluate_dir(workdir) / "snapshots.json").write_text('[{"step": 10, "tokens": 20480, "task": "piqa"}, {"step": ')
    report = build_report(load_run_source(workdir))
    [problem] = [p for p in report["problems"] if p["kind"] == "unreadable"]
    assert problem["stage"] == "evaluate" and "snapshots.json could not be read" in problem["message"]
    assert report["evaluation_snapshots"] == [] and report["evaluation"]

    rows = [{"step": 10, "tokens": 20480, "task": "piqa", "metric": "acc", "value": 0.5, "ci95": None,
             "baseline": 0.5}, {"step": 20, "task": "piqa", "metric": "acc", "value": 0.6}]
    (evaluate_dir(workdir) / "snapshots.json").write_text(json.dumps(rows))
    read, problem = read_snapshots(load_run_source(workdir).stage("evaluate"))
    # no interval: the value itself is judged against the baseline (here equal to it)
    assert [r["step"] for r in read] == [10] and read[0]["verdict"] == "chance" and read[0]["higher_is_better"]
    assert "1 of 2 rows lack step, tokens" in problem


def test_manifest_metrics_stand_in_for_a_missing_results_json(tmp_path):
    workdir = write_run(tmp_path / "run")
    from_results = build_report(load_run_source(workdir))["evaluation"]
    (evaluate_dir(workdir) / "results.json").unlink()
    from_manifest = build_report(load_run_source(workdir))["evaluation"]

    assert list(from_manifest) == list(from_results)
    for task, entry in from_results.items():
        assert from_manifest[task]["num_truncated"] == entry["num_truncated"]
        assert from_manifest[task]["shots"] is None  # the manifest does not say
        for metric, score in entry["scores"].items():
            stand_in = from_manifest[task]["scores"][metric]
            assert {k: stand_in[k] for k in ("value", "ci95", "baseline", "higher_is_better", "verdict")} == \
                   {k: score[k] for k in ("value", "ci95", "baseline", "higher_is_better", "verdict")}, (task, metric)


@pytest.mark.parametrize("ci95", [(0.2, 0.4), (0.45, 0.55), (0.6, 0.8), (7.5, 8.5), (8.1, 9.0), (2.0, 2.2)])
@pytest.mark.parametrize("baseline", [0.5, 8.0, None])
@pytest.mark.parametrize("higher_is_better", [True, False])
def test_the_verdict_agrees_with_the_evaluate_stage(ci95, baseline, higher_is_better):
    """The report marks exactly the scores the stage's own summary flags."""
    score = Score(value=sum(ci95) / 2, ci95=ci95, baseline=baseline, baseline_kind="", higher_is_better=higher_is_better)
    verdict = judge(baseline, ci95, higher_is_better)
    if baseline is None:
        assert verdict is None and clears_baseline(score)
    else:
        assert (verdict == "above") == clears_baseline(score)
        assert verdict == "chance" if ci95[0] <= baseline <= ci95[1] else verdict in ("above", "below")


def test_comparison_puts_scores_side_by_side_with_deltas(tmp_path):
    runs = [write_run(tmp_path / "a", name="a"),
            write_run(tmp_path / "b", name="b", lr=0.002,
                      evaluate_values={"piqa/acc": 0.6, "wikitext2/bits_per_byte": 2.0})]
    out = write_comparison([str(r) for r in runs], str(tmp_path / "cmp"))
    md = (out / "report.md").read_text()
    # the intervals overlap: the deltas are marked not significant
    assert "| evaluate: piqa | acc | 0.535 (≈ chance, baseline 0.5) | 0.6 (+0.065, n.s.) (≈ chance, baseline 0.5) |" in md
    assert "| evaluate: wikitext2 | bits_per_byte | 2.105 | 2 (-0.105, n.s.) |" in md
    assert "| evaluate: sst2 | acc | 0.415 (below baseline, baseline 0.54) |" in md

    html = (out / "report.html").read_text()
    row = re.search(r"<tr><td>evaluate: wikitext2</td><td>bits_per_byte</td>.*?</tr>", html).group(0)
    # run b keeps run a's intervals, which overlap: no colour (test_report_compare_fairness
    # checks the direction of significant deltas)
    assert '<span class="muted" title="the 95% intervals overlap">(-0.105) n.s.</span>' in row
    row = re.search(r"<tr><td>evaluate: piqa</td><td>acc</td>.*?</tr>", html).group(0)
    assert "(+0.065) n.s.</span>" in row and row.count("badge badge-chance") == 2
    data = json.loads((out / "comparison.json").read_text())
    bpb = next(r for r in data["metrics"] if r["group"] == "evaluate: wikitext2" and r["metric"] == "bits_per_byte")
    assert bpb["lower_is_better"] and bpb["contexts"][0]["verdict"] == "above"


def test_status_shows_key_scores_judged_the_right_way_round(tmp_path):
    workdir = write_run(tmp_path / "run")
    manifest = json.loads((evaluate_dir(workdir) / "manifest.json").read_text())
    shown = key_metrics("evaluate", manifest["metrics"])

    assert list(shown) == ["lambada_openai/perplexity", "lambada_openai/acc", "wikitext2/word_perplexity",
                           "wikitext2/bits_per_byte", "piqa/acc", "piqa/acc_norm", "copa/acc", "sst2/acc"]
    assert shown["wikitext2/bits_per_byte"] == "2.1050 [2.0610, 2.1530] baseline 8.0000 better than baseline"
    assert shown["sst2/acc"] == "0.4150 [0.3489, 0.4842] baseline 0.5400 below baseline"
    assert shown["lambada_openai/perplexity"] == "3519.2 [2710.4, 4637.9]"  # no baseline for a vocabulary's perplexity
    row = next(line for line in render(workdir).splitlines() if line.startswith("evaluate "))
    assert " done " in row and "piqa/acc=0.5350 [0.4658, 0.6029] baseline 0.5000 ≈ chance" in row
    assert "token_perplexity" not in row and "num_examples" not in row


def test_the_report_reads_what_the_evaluate_stage_writes(tmp_path):
    """results.json and manifest metrics made by the stage's own code (stages/evaluate/run.py
    write_outputs, TaskReport.metrics), not by hand."""
    from stages.evaluate import metrics
    from stages.evaluate.evaluate_task import TaskReport
    from stages.evaluate.run import write_outputs

    choices = [{"pred": p, "pred_norm": p, "pred_bytes": p} for p in (0, 1, 1, 0, 1, 1)]
    reports = [
        TaskReport(task="copa", kind="multiple_choice", shots=2, seed=1234, num_examples=6, num_truncated=1,
                   scores=metrics.multiple_choice_scores(choices, [0, 1, 0, 0, 1, 1], [2] * 6, False,
                                                         ["acc", "acc_norm"], seed=1234)),
        TaskReport(task="wikitext2", kind="perplexity", shots=0, seed=1234, num_examples=3, num_truncated=0,
                   scores=metrics.perplexity_scores([-900.0, -1200.0, -700.0], [300, 400, 250], [200, 260, 150],
                                                    [1000, 1300, 800], ["word_perplexity", "bits_per_byte"], 1234)),
    ]
    workdir = write_run(tmp_path / "run", snapshots=False)
    directory = evaluate_dir(workdir)
    write_outputs(directory, reports, type("Log", (), {"log": lambda self, record: None})())
    manifest = json.loads((directory / "manifest.json").read_text())
    manifest["metrics"] = {f"{r.task}/{k}": v for r in reports for k, v in r.metrics().items()}
    (directory / "manifest.json").write_text(json.dumps(manifest))

    evaluation = build_report(load_run_source(workdir))["evaluation"]
    assert list(evaluation) == ["copa", "wikitext2"] and evaluation["copa"]["shots"] == 2
    acc = evaluation["copa"]["scores"]["acc"]
    assert acc["value"] == pytest.approx(5 / 6) and acc["baseline"] == 0.5 and acc["verdict"] == "chance"
    bpb = evaluation["wikitext2"]["scores"]["bits_per_byte"]
    assert not bpb["higher_is_better"] and bpb["verdict"] == "above" and bpb["baseline"] == 8.0
    assert evaluation["wikitext2"]["scores"]["word_perplexity"]["verdict"] is None
    shown = key_metrics("evaluate", manifest["metrics"])
    assert shown["copa/acc"].endswith("baseline 0.5000 ≈ chance")
    assert shown["wikitext2/bits_per_byte"].endswith("baseline 8.0000 better than baseline")


def test_numbers_keep_four_decimals_for_scores_and_stay_short_for_huge_perplexities():
    assert [format_number(v) for v in (0.41504, 99.99991, 3519.24, 5700867055.5)] == \
           ["0.4150", "99.9999", "3519.2", "5.701e+09"]
