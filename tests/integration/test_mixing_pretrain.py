"""A data mixture end to end on real Ray Train + DeepSpeed (2 workers, CPU): the dataset
stage builds two sources (weights 3 and 1), pretraining mixes them, logs loss/<source>
and val_loss/<source> and checkpoints the mixture's position, and the report shows the
per-source table and plot. (Resuming that position, also on another world size, is
tested on the loader itself: tests/unit/test_mixing_loader.py.)"""

from __future__ import annotations

import json

import pytest

from stages.pretrain.run import run as run_pretrain
from stages.report.content import build_report
from stages.report.html_report import render_html
from stages.report.markdown import render_markdown
from stages.report.sources import RunSource, StageRecord
from tests.support.counting_dataset import logged_records, pretrain_context
from tests.support.mixture_dataset import build_mixture, build_upstream

pytestmark = pytest.mark.ray

CONFIG = dict(
    model={"family": "gpt", "num_layers": 1, "hidden_size": 32, "num_heads": 2}, zero_stage=2, precision="fp32",
    micro_batch_size=2, gradient_accumulation_steps=2, lr=1e-3, warmup_steps=1, log_every=1, eval_every=4,
    eval_batches=2, checkpoint_every=4, max_failures=0,
)


def test_mixture_trains_logs_each_source_checkpoints_and_reports(ray_session, data_dir, tmp_path):
    upstream = build_upstream(tmp_path, data_dir)
    dataset_metrics = build_mixture(upstream, tmp_path / "dataset")
    inputs = {"dataset": tmp_path / "dataset", "tokenizer": upstream["tokenizer"]}
    output_dir = tmp_path / "pretrain"

    metrics = run_pretrain(pretrain_context(output_dir, inputs, num_workers=2, max_steps=4, **CONFIG))
    assert metrics["steps"] == 4

    records = {r["step"]: r for r in logged_records(output_dir)}
    assert sorted(records) == [1, 2, 3, 4]
    # 2 micro batches a step; weights 3:1 -> sources horror, horror, romance, horror, ...:
    # romance has batches in steps 2 and 4 only, horror in every step.
    assert all("loss/horror" in r for r in records.values())
    assert [step for step, r in records.items() if "loss/romance" in r] == [2, 4]
    val = records[4]
    assert val["val_loss"] == pytest.approx(0.75 * val["val_loss/horror"] + 0.25 * val["val_loss/romance"])
    assert metrics["val_loss/romance"] == val["val_loss/romance"]

    # The checkpoint holds the mixture's position: 8 global micro batches of 2 workers x
    # 2 rows, 6 of them horror's and 2 romance's.
    state = json.loads(next(output_dir.glob("ray/pretrain/checkpoint-step00000004/**/extra_state_rank0.json"))
                       .read_text())["loader"]
    assert state["batches"] == 8 and state["names"] == ["horror", "romance"]
    assert [part["samples_consumed"] for part in state["sources"]] == [6 * 4, 2 * 4]

    source = RunSource(name="mix", config={}, stages=[
        StageRecord("dataset", "done", "d", {"metrics": dataset_metrics}, tmp_path / "dataset"),
        StageRecord("pretrain", "done", "p", {"metrics": metrics}, output_dir)])
    report = build_report(source)
    assert [row["source"] for row in report["mixture"]] == ["horror", "romance"]
    assert report["mixture"][0]["weight"] == 0.75
    assert report["mixture"][1]["val_loss"] == val["val_loss/romance"]
    markdown = render_markdown(report)
    assert "## Data mixture" in markdown and "| romance | 0.250 |" in markdown
    html = render_html(report, source)
    assert 'class="mixture"' in html and "loss per data source" in html
