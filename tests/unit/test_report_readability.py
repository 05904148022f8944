"""The report reads true at a glance (issue 34, item 5): no duplicate curves, one panel per
task family across training, a verdict for a one-document perplexity, truncated tasks
marked unreliable, a summary header, lineage with the git commit and the input files'
digest, and formatted numbers."""

from __future__ import annotations

import base64
import json
import struct
import subprocess
from pathlib import Path

from views.run_source import load_run_source
from pipeline.version import SOURCE_ROOT, git_commit
from stages.report.content import build_report
from stages.report.curves import panels
from stages.report.evaluation import snapshot_lines
from stages.report.evaluation_render import evaluation_html, snapshot_plots
from stages.report.html_report import render_html
from stages.report.markdown import render_markdown
from stages.report.numbers import format_bytes, format_float, format_stat
from tests.support.synthetic_run import write_run
from tests.unit.test_engine import FakeStages, config_file, run  # noqa: F401  (fixture)


def points(*values: float, start: int = 1) -> list[tuple[int, float]]:
    return [(start + i, v) for i, v in enumerate(values)]


def test_a_component_equal_to_its_total_is_not_drawn_twice():
    gpt = {"loss": points(5.0, 4.0), "clm_loss": points(5.0, 4.0 + 1e-12),
           "val_loss": points(4.5), "val_clm_loss": points(4.5)}
    drawn = panels(gpt)
    assert drawn["Training loss"] == {"loss": gpt["loss"]}
    assert drawn["Validation loss"] == {"val_loss": gpt["val_loss"]}
    # BERT's parts differ from their sum: all three lines stay.
    bert = {"loss": points(6.0, 5.0), "mlm_loss": points(5.3, 4.4), "nsp_loss": points(0.7, 0.6)}
    assert set(panels(bert)["Training loss"]) == {"loss", "mlm_loss", "nsp_loss"}


def snapshot(task: str, metric: str, value: float, higher: bool, step: int = 10) -> dict:
    return {"step": step, "tokens": step * 100, "task": task, "metric": metric, "value": value,
            "ci95": None, "baseline": None, "higher_is_better": higher}


def test_across_training_one_panel_per_family_and_perplexities_apart():
    rows = [snapshot("piqa", "acc", 0.5, True), snapshot("copa", "acc", 0.55, True),
            snapshot("lambada_openai", "acc", 0.02, True),
            snapshot("lambada_openai", "perplexity", 1e9, False),
            snapshot("wikitext2", "word_perplexity", 2e3, False), snapshot("wikitext2", "token_perplexity", 800, False),
            snapshot("wikitext2", "byte_perplexity", 4.3, False), snapshot("wikitext2", "bits_per_byte", 2.1, False),
            snapshot("ptb", "bits_per_byte", 3.4, False)]
    kinds = {"piqa": "multiple_choice", "copa": "multiple_choice", "lambada_openai": "cloze",
             "wikitext2": "perplexity", "ptb": "perplexity"}
    lines = snapshot_lines(rows, kinds)
    assert {panel: sorted(found) for panel, found in lines.items()} == {
        "multiple choice": ["copa acc", "piqa acc"],
        "cloze": ["lambada_openai acc"],
        "bits per byte": ["ptb bits_per_byte", "wikitext2 bits_per_byte"],  # every task: the same 0-8 scale
        # 1e9 never shares an axis with wikitext2's thousands; the byte perplexity is 2 ** bits_per_byte
        "lambada_openai perplexity": ["lambada_openai perplexity"],
        "wikitext2 perplexity": ["wikitext2 token_perplexity", "wikitext2 word_perplexity"],
    }


def test_across_training_legends_stand_beside_the_plot():
    rows = [snapshot(task, "acc", 0.5, True, step) for task in ("piqa", "copa", "arc_easy", "hellaswag")
            for step in (10, 20)]
    [(title, png)] = snapshot_plots(rows, {})
    width, _ = struct.unpack(">II", base64.b64decode(png)[16:24])  # the PNG header's IHDR size
    assert title == "Evaluation across training: scores (higher is better)"
    assert width == 720, "a wider figure: the legend goes beside the axes, not over the lines"


def results_with(workdir: Path, extra: dict) -> None:
    """Adds tasks to the synthetic run's results.json (the evaluate stage's format)."""
    (path,) = (workdir / "evaluate").glob("*/results.json")
    results = json.loads(path.read_text())
    results.update(extra)
    path.write_text(json.dumps(results))


PTB = {"task": "ptb", "kind": "perplexity", "shots": 0, "num_examples": 1, "num_truncated": 0, "scores": {
    "byte_perplexity": {"value": 10.6, "ci95": None, "baseline": 256.0, "higher_is_better": False}}}
BOOLQ = {"task": "boolq", "kind": "multiple_choice", "shots": 0, "num_examples": 100, "num_truncated": 74,
         "scores": {"acc": {"value": 0.38, "ci95": [0.29, 0.48], "baseline": 0.62, "higher_is_better": True}}}


def test_one_document_perplexity_is_judged_and_truncated_tasks_are_unreliable(tmp_path):
    workdir = write_run(tmp_path / "run")
    results_with(workdir, {"ptb": PTB, "boolq": BOOLQ})
    report = build_report(load_run_source(workdir))

    ptb = report["evaluation"]["ptb"]["scores"]["byte_perplexity"]
    assert ptb["verdict"] == "above" and ptb["no_interval"] == "no interval: one document"
    boolq = report["evaluation"]["boolq"]
    assert boolq["unreliable"].startswith("74 of 100 prompts (74%) were cut from the left")
    assert report["evaluation"]["sst2"]["unreliable"] is None  # 37 of 200: under a fifth
    problems = {(p["kind"], p["message"].split(":")[0]) for p in report["problems"]}
    assert ("unreliable", "boolq") in problems
    chance = next(p["message"] for p in report["problems"] if p["kind"] == "at chance")
    assert "boolq" not in chance, "an unreliable score is not reported as an ordinary verdict"

    md = render_markdown(report)
    assert ("| ptb | 0 | byte_perplexity (lower is better) | 10.6000 | - | 256.0 | "
            "better than baseline (no interval: one document) | 1 |") in md
    assert "| boolq | 0 | acc | 0.3800 | 0.2900 – 0.4800 | 0.6200 | **unreliable: 74 of 100 prompts" in md
    html = evaluation_html(report)
    assert 'class="badge badge-unreliable"' in html and html.count("badge-unreliable") == 1


def test_summary_header_lineage_digest_commit_and_formatted_numbers(tmp_path):
    workdir = write_run(tmp_path / "run", pretrain_metrics={"num_parameters": 1234567})
    index = json.loads((workdir / "pipeline.json").read_text())
    (workdir / "pipeline.json").write_text(json.dumps({**index, "git_commit": "0123456789abcdef" * 2 + "01234567"}))
    (ingest,) = (workdir / "ingest").glob("*/manifest.json")
    manifest = json.loads(ingest.read_text())
    manifest["identity"] = {"data": {"corpus/a.txt": "sha256:aa", "corpus/b.txt": "sha256:bb"}}
    manifest["metrics"]["bytes_in"] = 109870728
    ingest.write_text(json.dumps(manifest))
    (pretrain,) = (workdir / "pretrain").glob("*/manifest.json")
    manifest = json.loads(pretrain.read_text())
    manifest["config"].update(micro_batch_size=4, gradient_accumulation_steps=2, num_workers=2)
    pretrain.write_text(json.dumps(manifest))
    source = load_run_source(workdir)
    report = build_report(source)

    summary = report["summary"]
    assert summary["val_loss"] == 6.83 and summary["parameters"] == 1234567
    # no samples_per_s logged: the tokens of one sequence are unknown, so no count is made up
    assert summary["bits_per_byte"] == [("wikitext2", 2.105)] and summary["tokens_trained"] is None
    md = render_markdown(report)
    header = md.split("## Stages")[0]
    assert "final validation loss: **6.83**" in header and "parameters: **1,234,567**" in header
    assert "bits per byte (wikitext2): **2.105**" in header and "stage time: **7.0 s**" in header
    assert "best: wikitext2 bits_per_byte: **2.1050 (baseline 8.0000)**" in header
    html = render_html(report, source)
    assert html.index('<div class="summary">') < html.index("<h2>Stages</h2>")

    lineage = report["lineage"]
    assert lineage["git_commit"].startswith("0123456789abcdef")
    [row] = [r for r in lineage["stages"] if r["stage"] == "ingest"]
    assert row["data"]["files"] == 2 and len(row["data"]["sha256"]) == 64
    assert f"| 2 files, sha256 {row['data']['sha256'][:16]} |" in md
    assert "pretrain-pipeline git 0123456789abcdef" in md
    assert "| bytes_in | 109,870,728 (109.9 MB) |" in md
    assert "bytes_in=109,870,728 (109.9 MB)" in md  # the stages table too
    assert "<td class=num>109,870,728 (109.9 MB)</td>" in html


def test_tokens_trained_from_the_config_and_the_logged_rates(tmp_path):
    workdir = write_run(tmp_path / "run")
    (pretrain,) = (workdir / "pretrain").glob("*")
    lines = [json.loads(line) for line in (pretrain / "metrics.jsonl").read_text().splitlines()]
    for record in lines:
        record["samples_per_s"] = record["tokens_per_s"] / 128  # sequences of 128 tokens
    (pretrain / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    manifest = json.loads((pretrain / "manifest.json").read_text())
    manifest["config"].update(micro_batch_size=4, gradient_accumulation_steps=2, num_workers=2)
    (pretrain / "manifest.json").write_text(json.dumps(manifest))
    summary = build_report(load_run_source(workdir))["summary"]
    assert summary["tokens_trained"] == 40 * 16 * 128
    assert "tokens trained: **81,920 (0.68 epochs)**" in render_markdown(build_report(load_run_source(workdir)))


def test_numbers_are_formatted_by_their_name():
    assert format_stat("bytes_in", 109870728) == "109,870,728 (109.9 MB)"
    assert format_stat("documents_out", 57966) == "57,966"
    assert format_stat("wall_seconds", 95.3) == "1 min 35 s"
    assert format_stat("duplicate_rate", 0.000586) == "0.000586"
    assert format_stat("tokens_per_second", 19312.5) == "19,312" and format_float(0.51) == "0.51"
    assert format_bytes(999) == "999 B" and format_bytes(1.5e12) == "1.5 TB"


def test_a_run_records_the_git_commit_of_its_code(config_file):  # noqa: F811
    run(config_file, FakeStages(), only=["ingest"])
    index = json.loads((config_file.parent / "work" / "pipeline.json").read_text())
    head = subprocess.run(["git", "-C", str(SOURCE_ROOT), "rev-parse", "HEAD"], capture_output=True, text=True)
    if git_commit() is None or head.returncode != 0:  # not a git checkout (an installed package)
        assert "git_commit" not in index
        return
    assert index["git_commit"].split(" ")[0] == head.stdout.strip()


def test_an_mfu_above_100_percent_is_a_problem_naming_peak_tflops(tmp_path):
    workdir = write_run(tmp_path / "run", pretrain_metrics={"mfu": 3.2},
                        config_overrides={"pretrain": {"peak_tflops": 1.0}})
    [problem] = [p for p in build_report(load_run_source(workdir))["problems"] if p["kind"] == "mfu above 100%"]
    assert problem["stage"] == "pretrain" and "MFU 320% is impossible" in problem["message"]
    assert "(pretrain.peak_tflops=1)" in problem["message"]
    assert not [p for p in build_report(load_run_source(write_run(tmp_path / "ok", pretrain_metrics={"mfu": 0.4})))
                ["problems"] if p["kind"] == "mfu above 100%"]
