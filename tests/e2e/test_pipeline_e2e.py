"""The whole pipeline through the real CLI on the tiny config: all six stages, then a
fully cached rerun, then plan after a config change; and one Ctrl-C mid-pretrain, which
stops the run at once and leaves a committed checkpoint that `plan` offers to resume.

The interrupted run starts from a copy of the finished run's ingest, tokenizer and
dataset (the same fingerprints, so cached): the stages around pretrain are what the
finished run's tests check, and building them again took about half of the test's time.
Resuming from the checkpoint is run, not just planned, by the tests that kill a driver:
tests/integration/test_pretrain.py (losses equal to the uninterrupted run's),
tests/e2e/test_s3_pipeline_e2e.py (through the CLI, from a bucket) and
tests/e2e/test_sweep_e2e.py (a sweep point)."""

from __future__ import annotations

import json
import shutil
import signal
import time
from html import escape
from pathlib import Path

import pytest

from pipeline.graph import STAGE_NAMES
from tests.e2e.cli import pretrain_cli, start_cli
from tests.e2e.conftest import CONFIG

pytestmark = [pytest.mark.e2e, pytest.mark.ray]
UPSTREAM_OF_PRETRAIN = ("ingest", "tokenizer", "dataset")


def _assert_transformers_loads(hf_dir: Path) -> None:
    """The exported folder is a real Hugging Face checkpoint: it loads and predicts."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(hf_dir)
    tokenizer = AutoTokenizer.from_pretrained(hf_dir)
    ids = tokenizer("It was a dark and stormy night", return_tensors="pt")["input_ids"]
    with torch.no_grad():
        loss = model(ids, labels=ids).loss
    assert torch.isfinite(loss) and loss.item() < 10


def manifest(workdir: Path, stage: str) -> dict:
    (path,) = workdir.glob(f"{stage}/*/manifest.json")
    return json.loads(path.read_text())


def test_all_six_stages_finish_with_real_outputs(finished_run):
    workdir, _, result = finished_run
    for stage in STAGE_NAMES:
        assert f"[{stage}] done" in result.stdout, result.stdout
    pretrain_dir = next(workdir.glob("pretrain/*/"))
    assert (pretrain_dir / "model" / "model.safetensors").stat().st_size > 0
    assert (pretrain_dir / "metrics.jsonl").is_file()
    _assert_transformers_loads(pretrain_dir / "hf")
    pretrain = manifest(workdir, "pretrain")["metrics"]
    assert pretrain["steps"] == 40 and pretrain["val_loss"] < 8.0
    accuracy = manifest(workdir, "finetune")["metrics"]["sst2/accuracy"]
    assert 0.0 <= accuracy <= 1.0
    report_dir = next(workdir.glob("report/*/"))
    report_md = (report_dir / "report.md").read_text()
    assert "| pretrain | done |" in report_md and "| sst2 | accuracy |" in report_md
    report = json.loads((report_dir / "metrics.json").read_text())
    assert report["finetune"]["sst2/accuracy"] == accuracy
    _assert_samples_kept_and_reported(workdir, pretrain_dir, report_dir)


def _assert_samples_kept_and_reported(workdir: Path, pretrain_dir: Path, report_dir: Path) -> None:
    """pretrain.samples of configs/gpt-tiny.yaml: its two prompts at steps 20 (eval_every)
    and 40 (the end), inventoried by the manifest, timed, shown in the report, and written
    again by `pretrain generate` with the same settings."""
    prompts = ["It was a dark and stormy night", "The old man"]
    lines = [json.loads(line) for line in (pretrain_dir / "samples.jsonl").read_text().splitlines()]
    assert [(line["step"], line["prompt"]) for line in lines] == [(step, p) for step in (20, 40) for p in prompts]
    assert all(line["text"] and line["settings"]["max_new_tokens"] == 24 for line in lines)
    assert lines[-1]["tokens_seen"] == 2 * lines[0]["tokens_seen"] == 40 * 2 * 8 * 64  # steps x workers x batch x seq
    pretrain = manifest(workdir, "pretrain")
    assert "samples.jsonl" in {entry["path"] for entry in pretrain["files"]}
    assert pretrain["metrics"]["sampling_seconds"] > 0
    assert pretrain["metrics"]["sampling_share"] == pytest.approx(
        pretrain["metrics"]["sampling_seconds"] / pretrain["metrics"]["wall_seconds"])
    html = (report_dir / "report.html").read_text()
    assert "<h2>Samples</h2>" in html and "Step 20 (20,480 tokens)" in html and "Step 40 (40,960 tokens)" in html
    assert escape(lines[-1]["text"]) in html
    assert "## Samples" in (report_dir / "report.md").read_text()
    # The exported model, with the samples' seed and settings, writes the last sample again.
    generated = pretrain_cli("generate", str(workdir), "--prompt", prompts[1], "--seed", "1234", "--temperature",
                             "0.8", "--top-k", "50", "--max-new-tokens", "24", "--device", "cpu", "--json")
    assert generated.returncode == 0, generated.stderr
    assert json.loads(generated.stdout.splitlines()[0])["text"] == lines[-1]["text"]


def test_status_shows_one_row_per_stage(finished_run):
    workdir, _, _ = finished_run
    status = pretrain_cli("status", str(workdir))
    assert status.returncode == 0
    rows = [line for line in status.stdout.splitlines()[3:] if line.strip()]  # after state, header, dashes
    assert len(rows) == len(STAGE_NAMES) and all(" done " in row for row in rows), status.stdout
    assert "sst2/accuracy=" in status.stdout


def test_cached_rerun_starts_no_ray_and_runs_nothing(finished_run):
    workdir, args, _ = finished_run
    rerun = pretrain_cli("run", *args)
    assert rerun.returncode == 0, rerun.stderr
    assert "Ray" not in rerun.stdout and "running" not in rerun.stdout
    assert rerun.stdout.count("cached") == len(STAGE_NAMES)


def test_plan_names_the_changed_key(finished_run):
    _, args, _ = finished_run
    result = pretrain_cli("plan", *args, "-o", "pretrain.lr=0.0005")
    assert result.returncode == 0, result.stderr
    lines = {line.split()[0]: line for line in result.stdout.splitlines()[2:] if line.strip()}
    assert "cached" in lines["dataset"]
    assert "stale: pretrain.lr 0.001 -> 0.0005" in lines["pretrain"]
    assert "run" in lines["finetune"] and "input 'pretrain' changed" in lines["finetune"]


# Ctrl-C only: a SIGKILLed driver's resume is tested more strictly (losses equal to the
# uninterrupted run's) by tests/integration/test_pretrain.py, and a dead driver's workdir
# lock by tests/unit/test_stage_lock.py.
@pytest.mark.parametrize("interrupt", [signal.SIGINT], ids=["Ctrl-C"])
def test_interrupt_mid_pretrain_leaves_a_checkpoint_the_next_run_resumes(finished_run, tmp_path, ray_address,
                                                                         interrupt):
    reference_workdir, _, _ = finished_run
    workdir = tmp_path / "gpt-tiny"
    args = (CONFIG, "-o", f"workdir={workdir}", "-o", f"ray.address={ray_address}")
    for stage in UPSTREAM_OF_PRETRAIN:
        shutil.copytree(reference_workdir / stage, workdir / stage, symlinks=True)
    driver = start_cli("run", *args, log=tmp_path / "first.log")
    try:
        _wait_for_checkpoint(workdir, driver, tmp_path / "first.log")
        driver.send_signal(interrupt)  # one signal: a single Ctrl-C must do
        sent = time.monotonic()
        returncode = driver.wait(timeout=120)
        seconds_to_exit = time.monotonic() - sent
    finally:
        if driver.poll() is None:
            driver.kill()
    if interrupt == signal.SIGINT:
        # Ray Train's own SIGINT handler waited for its controller: up to 136 s, 3 presses.
        assert returncode == 130, (tmp_path / "first.log").read_text()[-3000:]
        assert seconds_to_exit < 30, f"Ctrl-C took {seconds_to_exit:.0f} s to stop the run"
        assert "run the same command to resume" in (tmp_path / "first.log").read_text()
    assert not list(workdir.glob("pretrain/*/manifest.json"))
    # checkpoint_every is 10: Ray Train committed one (its snapshot names it) before the kill.
    (snapshot,) = workdir.glob("pretrain/*/ray/pretrain/checkpoint_manager_snapshot.json")
    assert "checkpoint-step000000" in snapshot.read_text()

    # The workdir lock went with the driver, and the next run would resume pretrain.
    plan = pretrain_cli("plan", *args)
    assert plan.returncode == 0, plan.stdout[-3000:] + plan.stderr[-3000:]
    lines = {line.split()[0]: line for line in plan.stdout.splitlines()[2:] if line.strip()}
    assert all("cached" in lines[stage] for stage in UPSTREAM_OF_PRETRAIN), plan.stdout
    assert "an earlier attempt was interrupted; resumes from its partial output" in lines["pretrain"], plan.stdout


def _records(workdir: Path) -> list[dict]:
    files = list(workdir.glob("pretrain/*/metrics.jsonl"))
    if not files:
        return []
    return [json.loads(line) for line in files[0].read_text().splitlines() if line.strip()]


def _wait_for_checkpoint(workdir: Path, driver, log: Path, timeout: float = 400) -> int:
    """Block until pretrain has committed a checkpoint and is still training; its step."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if driver.poll() is not None:
            pytest.fail(f"driver exited before a checkpoint:\n{log.read_text()[-3000:]}")
        checkpoints = list(workdir.glob("pretrain/*/ray/**/checkpoint_*"))
        steps = [r["step"] for r in _records(workdir) if "loss" in r]
        if checkpoints and steps and 10 <= steps[-1] < 30:
            return steps[-1]
        time.sleep(0.1)
    pytest.fail(f"no checkpoint within {timeout}s:\n{log.read_text()[-3000:]}")
