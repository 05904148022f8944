"""The report stage on synthetic manifests: report.html is self-contained and holds
plots and tables, report.md and metrics.json keep their keys, curves are deduplicated
after a resume, and skipped, failed or resumed stages are listed."""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace

from pipeline.context import StageContext
from views.run_source import load_run_source
from stages.report.content import build_report
from stages.report.curves import finetune_series, panels, pretrain_series
from stages.report.html_report import render_html
from stages.report.markdown import render_markdown
from stages.report.run import run
from tests.support.synthetic_run import write_run

UPSTREAM = ("ingest", "tokenizer", "dataset", "pretrain", "finetune", "evaluate")


def stage_context(workdir: Path, output_dir: Path) -> StageContext:
    """What the engine hands the report stage for the synthetic run."""
    index = json.loads((workdir / "pipeline.json").read_text())
    inputs = {name: workdir / name / index["stages"][name] for name in UPSTREAM}
    manifests = {name: json.loads((path / "manifest.json").read_text()) for name, path in inputs.items()}
    experiment = SimpleNamespace(name="synthetic", resolved_workdir=workdir,
                                 model_dump=lambda mode="json": {"name": "synthetic", "seed": 0})
    output_dir.mkdir(parents=True, exist_ok=True)
    return StageContext(name="report", config=SimpleNamespace(curve_points=10), experiment=experiment,
                        output_dir=output_dir, inputs=inputs, input_manifests=manifests,
                        fingerprint="report-fp")


def test_stage_writes_html_md_and_metrics_with_stable_keys(tmp_path):
    workdir = write_run(tmp_path / "run", run_started=0.0)
    out = tmp_path / "out"
    metrics = run(stage_context(workdir, out))

    assert metrics["finetune/sst2/accuracy"] == 0.51 and metrics["stages_reported"] == 6
    md = (out / "report.md").read_text()
    assert "| pretrain | done |" in md and "| sst2 | accuracy |" in md
    assert "| mrpc | f1 | 0.8000 |" in md and "GLUE average over 2 task(s)" in md
    report = json.loads((out / "metrics.json").read_text())
    assert report["finetune"]["sst2/accuracy"] == 0.51
    assert {"experiment", "generated", "stages", "finetune", "pretrain_curve", "lineage", "stats",
            "finetune_tasks", "glue_average", "problems", "evaluation", "evaluation_snapshots"} <= set(report)
    assert report["stats"]["ingest"]["documents_out"] == 1229
    assert report["lineage"]["libraries"]["ray"] == "2.60.0"


def test_html_is_self_contained_with_plots_and_tables(tmp_path):
    workdir = write_run(tmp_path / "run", run_started=0.0)
    out = tmp_path / "out"
    run(stage_context(workdir, out))
    html = (out / "report.html").read_text()

    # Nothing is fetched: every image is inline data and there are no scripts or links.
    assert not re.search(r'(src|href)="(?!data:)', html), "report.html refers to an external file"
    assert "<script" not in html
    images = re.findall(r'<img class="plot" alt="([^"]+)" src="data:image/png;base64,', html)
    assert images == ["Pretraining: training loss", "Pretraining: validation loss",
                      "Pretraining: learning rate", "Pretraining: throughput",
                      "Fine-tuning: training loss per task",
                      # one panel per task family; each task's perplexities on their own axis
                      "Evaluation across training: cloze (higher is better)",
                      "Evaluation across training: multiple choice (higher is better)",
                      "Evaluation across training: bits per byte (lower is better)",
                      "Evaluation across training: lambada_openai perplexity (lower is better)",
                      "Evaluation across training: wikitext2 perplexity (lower is better)"]
    for css_class in ("stages", "finetune", "evaluation", "evaluation-snapshots", "lineage", "libraries",
                      "stats stats-ingest",
                      "stats stats-tokenizer", "stats stats-dataset"):
        assert f'<table class="{css_class}">' in html
    assert "3.11.7" in html and "2.60.0" in html  # library versions in the lineage


def test_curves_keep_the_last_record_per_step_after_a_resume(tmp_path):
    workdir = write_run(tmp_path / "run", resumed=True)
    pretrain_dir = next((workdir / "pretrain").iterdir())
    series = pretrain_series(pretrain_dir)

    steps = [step for step, _ in series["loss"]]
    assert steps == list(range(1, 41)), "each step exactly once, in order"
    assert max(loss for _, loss in series["loss"]) < 99.0, "the crashed attempt's records won"
    assert series["val_loss"] == [(20, 8.1 - 20 * 0.05), (40, 8.1 - 40 * 0.05)]
    assert set(panels(series)) == {"Training loss", "Validation loss", "Learning rate", "Throughput"}


def test_finetune_curves_are_grouped_by_task(tmp_path):
    workdir = write_run(tmp_path / "run")
    by_task = finetune_series(next((workdir / "finetune").iterdir()))
    assert set(by_task) == {"sst2", "mrpc"}
    assert [step for step, _ in by_task["sst2"]["loss"]] == [10, 20, 30]


def test_scores_are_grouped_by_task_with_the_glue_average(tmp_path):
    report = build_report(load_run_source(write_run(tmp_path / "run")))
    assert report["finetune_tasks"] == {"sst2": {"accuracy": 0.51}, "mrpc": {"accuracy": 0.68, "f1": 0.80}}
    assert "sst2/train_examples" not in report["finetune"], "counts are not scores"
    # GLUE: MRPC's two metrics are averaged first, then the tasks.
    assert abs(report["glue_average"]["score"] - (0.51 + (0.68 + 0.80) / 2) / 2) < 1e-9


def test_reused_stages_are_listed_as_skipped(tmp_path):
    # The latest run started after every stage had finished: all were cache hits.
    workdir = write_run(tmp_path / "run", run_started=4e9)
    report = build_report(load_run_source(workdir))
    skipped = [p["stage"] for p in report["problems"] if p["kind"] == "skipped"]
    assert skipped == ["ingest", "tokenizer", "dataset", "pretrain", "finetune", "evaluate", "report"]
    assert "| ingest | skipped | reused the cached result" in render_markdown(report)


def test_failed_and_unfinished_stages_are_shown_and_escaped(tmp_path):
    workdir = write_run(tmp_path / "run", fail="pretrain")
    source = load_run_source(workdir)
    report = build_report(source)
    kinds = {p["stage"]: p["kind"] for p in report["problems"]}
    assert kinds["pretrain"] == "failed" and kinds["finetune"] == "not run"
    assert [r["state"] for r in report["stages"]] == ["done", "done", "done", "failed", "not run", "not run",
                                                      "not run"]
    assert report["evaluation"] == {} and report["evaluation_snapshots"] == []

    html = render_html(report, source)
    assert "CUDA &lt;out&gt; of memory" in html and "<out>" not in html
    md = render_markdown(report)
    assert "CUDA &lt;out&gt; of memory \\| boom" in md, "a '|' in an error must not split the table"
    # The failed stage's metrics.jsonl still draws its curves.
    assert 'alt="Pretraining: training loss"' in html


def test_resumed_pretraining_and_missing_task_are_reported(tmp_path):
    workdir = write_run(tmp_path / "run", resumed=True)
    manifest_path = next((workdir / "finetune").glob("*/manifest.json"))
    manifest = json.loads(manifest_path.read_text())
    manifest["config"] = {"tasks": ["sst2", "mrpc", "rte"]}
    manifest_path.write_text(json.dumps(manifest))

    messages = [(p["stage"], p["kind"], p["message"]) for p in build_report(load_run_source(workdir))["problems"]]
    assert ("pretrain", "resumed", "resumed from the checkpoint at step 10") in messages
    assert ("finetune", "missing", "task rte has no score") in messages
