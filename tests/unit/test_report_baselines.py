"""Every fine-tuning score in the reports sits next to its baseline and 95% interval, a score
that is not above its baseline is marked (report.md, report.html, metrics.json, the
comparison, `pretrain status`), the GLUE average follows GLUE's per-task rules, and a
T5 task whose generations could not be read back is listed as a problem."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from views.compare import write_comparison
from views.run_source import load_run_source
from pipeline.status import key_metrics
from stages.report.content import build_report
from stages.report.run import write_report
from tests.support.synthetic_run import write_run

# The demo's three tasks as measured: CoLA and MRPC predict one class throughout (their
# majority-class scores on the dev sets: 721 of 1043, 279 of 408).
COLA_ACC, MRPC_ACC = 721 / 1043, 279 / 408
MRPC_F1 = 2 * MRPC_ACC / (1 + MRPC_ACC)
DEMO = {  # value, baseline, 95% interval
    "cola/matthews_corrcoef": (0.0, 0.0, 0.0, 0.0), "cola/accuracy": (COLA_ACC, COLA_ACC, 0.6624, 0.7188),
    "sst2/accuracy": (0.5940, 0.5092, 0.5610, 0.6262),
    "mrpc/f1": (MRPC_F1, MRPC_F1, 0.7830, 0.8390), "mrpc/accuracy": (MRPC_ACC, MRPC_ACC, 0.6370, 0.7273),
}


def demo_metrics(scores=DEMO) -> dict:
    metrics = {"sst2/train_examples": 256}
    for key, (value, baseline, low, high) in scores.items():
        metrics.update({key: value, f"{key}_baseline": baseline, f"{key}_ci95_low": low, f"{key}_ci95_high": high})
    return metrics


def write_demo_run(root: Path, metrics: dict, name: str = "synthetic", config: dict | None = None) -> Path:
    workdir = write_run(root, name=name)
    manifest_path = next((workdir / "finetune").glob("*/manifest.json"))
    manifest = json.loads(manifest_path.read_text())
    manifest["metrics"] = metrics
    manifest["config"] = config or {"tasks": ["cola", "sst2", "mrpc"]}
    manifest_path.write_text(json.dumps(manifest))
    return workdir


def test_the_glue_average_uses_each_tasks_official_score(tmp_path):
    report = build_report(load_run_source(write_demo_run(tmp_path / "run", demo_metrics())))
    glue = report["glue_average"]
    # CoLA counts its MCC (not the mean of MCC and accuracy), MRPC the mean of F1 and accuracy.
    assert glue["per_task"] == pytest.approx({"cola": 0.0, "sst2": 0.5940, "mrpc": (MRPC_F1 + MRPC_ACC) / 2})
    assert round(glue["score"], 4) == 0.4473
    old_rule = (COLA_ACC / 2 + 0.5940 + (MRPC_F1 + MRPC_ACC) / 2) / 3  # every metric of a task averaged
    assert round(old_rule, 4) == 0.5626 and abs(glue["score"] - old_rule) > 0.1
    # Its baseline is the same average of the tasks' baselines; SST-2 alone lifts it above that.
    assert glue["baseline"] == pytest.approx((0.0 + 0.5092 + (MRPC_F1 + MRPC_ACC) / 2) / 3)
    assert glue["baseline"] < glue["ci95"][0] < glue["score"] < glue["ci95"][1] and glue["verdict"] == "above"
    # Standard errors from the intervals (CoLA's is 0), tasks independent: sqrt(sum) / 3.
    sst2_error, mrpc_error = 0.0652 / 3.92, (0.0560 / 3.92 + 0.0903 / 3.92) / 2
    half_width = 1.96 * (sst2_error**2 + mrpc_error**2) ** 0.5 / 3
    assert glue["ci95"] == pytest.approx([glue["score"] - half_width, glue["score"] + half_width], abs=1e-4)


def test_mnli_counts_once_as_the_mean_of_matched_and_mismatched():
    from stages.report.scores import glue_average

    glue = glue_average({"mnli": {"accuracy": 0.80}, "mnli_mm": {"accuracy": 0.70}, "rte": {"accuracy": 0.6},
                         "stsb": {"pearson": 0.8, "spearman": 0.6}})
    assert glue["per_task"] == pytest.approx({"mnli": 0.75, "rte": 0.6, "stsb": 0.7})
    assert glue["score"] == pytest.approx((0.75 + 0.6 + 0.7) / 3) and glue["baseline"] is None


def test_reports_show_baselines_intervals_and_mark_scores_at_chance(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    report = write_report(load_run_source(write_demo_run(tmp_path / "run", demo_metrics())), out)

    assert report["finetune_tasks"]["cola"] == {"matthews_corrcoef": 0.0, "accuracy": COLA_ACC}
    assert "cola/matthews_corrcoef_baseline" not in report["finetune"], "a baseline is not a score"
    saved = json.loads((out / "metrics.json").read_text())
    assert saved["finetune_context"]["sst2"]["accuracy"] == {"baseline": 0.5092, "ci95": [0.5610, 0.6262],
                                                             "verdict": "above"}
    assert saved["finetune_context"]["mrpc"]["f1"]["verdict"] == "chance"

    md = (out / "report.md").read_text()
    assert "| task | metric | value | 95% CI | baseline | vs baseline |" in md
    assert "| cola | matthews_corrcoef | 0.0000 | 0.0000 – 0.0000 | 0.0000 | **≈ chance** |" in md
    assert "| mrpc | f1 | 0.8122 | 0.7830 – 0.8390 | 0.8122 | **≈ chance** |" in md
    assert "| sst2 | accuracy | 0.5940 | 0.5610 – 0.6262 | 0.5092 | above baseline |" in md
    assert "GLUE average over 3 task(s) (cola, mrpc, sst2): **0.4473**" in md

    html = (out / "report.html").read_text().split("<h2>Evaluation")[0]  # zero/few-shot badges: their own test
    assert html.count('class="badge badge-chance"') == 4
    assert html.count('class="badge badge-above"') == 2  # SST-2, and the GLUE average
    at_chance = [p["message"] for p in report["problems"] if p["kind"] == "at chance" and p["stage"] == "finetune"]
    assert len(at_chance) == 2 and at_chance[0].startswith("task cola: not above")
    assert "| finetune | at chance | task mrpc: not above what ignoring the input scores: f1" in md


def test_a_run_without_baselines_still_reports_its_scores(tmp_path):
    report = build_report(load_run_source(write_run(tmp_path / "run")))
    assert report["finetune_context"] == {} and report["glue_average"]["baseline"] is None
    assert not [p for p in report["problems"] if p["kind"] == "at chance" and p["stage"] == "finetune"]


def test_unreadable_t5_generations_are_a_problem_past_the_configured_fraction(tmp_path):
    metrics = {"sst2/accuracy": 0.0, "sst2/unreadable_predictions": 872, "sst2/unreadable_fraction": 1.0,
               "rte/accuracy": 0.5, "rte/unreadable_predictions": 14, "rte/unreadable_fraction": 0.05}
    config = {"tasks": ["sst2", "rte"], "max_unreadable_fraction": 0.1}
    report = build_report(load_run_source(write_demo_run(tmp_path / "run", metrics, config=config)))
    [problem] = [p for p in report["problems"] if p["kind"] == "unreadable"]
    assert problem["message"].startswith("task sst2: 872 dev generations (100%) could not be read back")
    config["max_unreadable_fraction"] = 0.01
    report = build_report(load_run_source(write_demo_run(tmp_path / "run2", metrics, config=config)))
    assert len([p for p in report["problems"] if p["kind"] == "unreadable"]) == 2


def test_status_and_comparison_show_the_verdict(tmp_path):
    shown = key_metrics("finetune", demo_metrics())
    assert shown["sst2/accuracy"] == "0.5940 [0.5610, 0.6262] baseline 0.5092 above baseline"
    assert shown["cola/matthews_corrcoef"].endswith("baseline 0.0000 ≈ chance")  # MCC is a score here too
    assert "cola/matthews_corrcoef_baseline" not in shown

    runs = [write_demo_run(tmp_path / "a", demo_metrics(), name="a"),
            write_demo_run(tmp_path / "b", demo_metrics({**DEMO, "cola/matthews_corrcoef": (0.3, 0.0, 0.2, 0.4)}),
                           name="b")]
    out = write_comparison([str(r) for r in runs], str(tmp_path / "cmp"))
    md = (out / "report.md").read_text()
    # [0, 0] and [0.2, 0.4] do not overlap: a significant delta
    assert "| cola | matthews_corrcoef | 0 (≈ chance, baseline 0) | 0.3 (+0.3 ✱) |" in md
    assert 'badge badge-chance' in (out / "report.html").read_text()
