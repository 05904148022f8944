"""The engine's per-stage wandb run (pipeline.wandb_stage_log), offline: the files hold
what was logged (summary metrics, the stats table, the report artifact); a wandb error
only warns; disabled writes nothing."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from pipeline.wandb_stage_log import log_stage
from tests.support.wandb_offline import offline_log


def experiment(mode: str):
    wandb = SimpleNamespace(mode=mode, project="pp-tests", entity=None)
    return SimpleNamespace(name="unit", tracking=SimpleNamespace(wandb=wandb))


def manifest(stage: str, **metrics) -> dict:
    return {"stage": stage, "fingerprint": "fp0123456789", "code_version": "1", "inputs": {},
            "config": {"vocab_size": 2048}, "wall_seconds": 1.5, "metrics": metrics}


@pytest.fixture(autouse=True)
def quiet_wandb(monkeypatch):
    monkeypatch.setenv("WANDB_SILENT", "true")


def test_tokenizer_stats_go_to_the_summary_and_a_table(tmp_path):
    assert log_stage(experiment("offline"), manifest("tokenizer", vocab_size=2048, fertility=1.67), tmp_path)
    content = offline_log(tmp_path, [b"fertility"])
    (run_dir,) = (tmp_path / "wandb").glob("offline-run-*")
    assert b"fertility" in content and b"fp0123456789" in content and b"tokenizer" in content
    (table_file,) = run_dir.rglob("*.table.json")
    table = json.loads(table_file.read_text())
    assert table["columns"] == ["statistic", "value"]
    assert ["vocab_size", "2048"] in table["data"] and ["fertility", "1.67"] in table["data"]


def test_the_report_is_logged_as_an_artifact(tmp_path):
    (tmp_path / "report.html").write_text("<html>report</html>")
    (tmp_path / "report.md").write_text("# report")
    assert log_stage(experiment("offline"), manifest("report", stages_reported=5), tmp_path)
    content = offline_log(tmp_path, [b"report.html"])
    assert b"unit-report" in content and b"report.html" in content


def test_disabled_and_self_tracking_stages_write_nothing(tmp_path):
    assert not log_stage(experiment("disabled"), manifest("ingest", documents_out=3), tmp_path)
    assert not log_stage(experiment("offline"), manifest("pretrain", steps=3), tmp_path)
    assert not (tmp_path / "wandb").exists()


def test_a_wandb_error_is_only_a_warning(tmp_path, monkeypatch):
    import wandb

    def broken_init(**kwargs):
        raise RuntimeError("network down")

    monkeypatch.setattr(wandb, "init", broken_init)
    with pytest.warns(UserWarning, match="network down"):
        assert not log_stage(experiment("online"), manifest("dataset", train_rows=3), tmp_path)
