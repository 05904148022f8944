"""The runner's own console lines (pipeline/runner.py) with plain stage functions: a stage
left out by --only says so without sounding like a fault, and a done line does not repeat
the per-task table the stage printed above it."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.config import load_config
from pipeline.planner import Selection
from pipeline.runner import run_pipeline


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    (tmp_path / "data").mkdir()
    path = tmp_path / "experiment.yaml"
    path.write_text(f"name: unit\nworkdir: {tmp_path / 'work'}\ndata_dir: {tmp_path / 'data'}\n"
                    "ingest:\n  sources:\n    - path: corpus/*.txt\n")
    return path


def finetune_like(spec):
    def stage(ctx):
        (ctx.output_dir / "out.txt").write_text(spec.name)
        if spec.name == "finetune":  # what stages/finetune returns: per-task scores only
            return {"sst2/accuracy": 0.5092, "sst2/accuracy_baseline": 0.5092, "sst2/accuracy_ci95_low": 0.476}
        return {"rows": 12, "seconds_scoring": 3.156, "sst2/num_examples": 12}

    return stage


def run(config_file: Path, **selection) -> list[str]:
    lines: list[str] = []
    run_pipeline(load_config(config_file), Selection(**selection), echo=lines.append,
                 load_stage=finetune_like, use_ray=False)
    return lines


def test_a_stage_left_out_by_only_says_not_selected(config_file):
    lines = run(config_file, only=("ingest",))
    later = [line for line in lines if line.startswith(("[tokenizer]", "[report]"))]
    assert len(later) == 2 and all(" not selected (" in line for line in later), later
    assert not any("missing" in line for line in lines), lines


def test_done_lines_leave_per_task_metrics_to_the_stage_table(config_file):
    done = {line.split("]")[0][1:]: line for line in run(config_file) if " done in " in line}
    assert done["finetune"].endswith("s")  # "[finetune] done in 0.0s": nothing to repeat
    assert "sst2/" not in done["finetune"] and "sst2/" not in done["evaluate"]
    assert done["evaluate"].endswith("rows=12 seconds_scoring=3.156")
