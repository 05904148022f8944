"""The GPT-2 paper's generation tasks through the real CLI, on a copy of the session's
finished tiny GPT run: the evaluate stage re-runs with a translation spec (BLEU, chrF)
and a TL;DR: spec (ROUGE) of a few examples each, and the scores, with baseline and
interval, reach results.json, the texts sacreBLEU re-scores, `pretrain status` and the
report."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from stages.evaluate.spec import resolve_task_spec
from tests.e2e.cli import pretrain_cli
from tests.e2e.conftest import CONFIG

pytestmark = [pytest.mark.e2e, pytest.mark.ray]


def small_spec(tmp_path: Path, name: str) -> str:
    """The built-in spec with room for the tiny model's 64-token context (8 new tokens)."""
    text = Path(resolve_task_spec(name).file).read_text(encoding="utf-8")
    text = text.replace(f"name: {name}", f"name: {name}_e2e")
    for tokens in ("128", "64"):
        text = text.replace(f"max_new_tokens: {tokens}", "max_new_tokens: 8")
    path = tmp_path / f"{name}_e2e.yaml"
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_translation_and_tldr_scores_reach_status_and_report(finished_run, tmp_path):
    workdir, args, _ = finished_run
    copy = tmp_path / "gpt-tiny"
    shutil.copytree(workdir, copy, symlinks=True)
    tasks = [small_spec(tmp_path, "multi30k_en_de"), small_spec(tmp_path, "dialogsum_tldr")]
    run_args = (CONFIG, "-o", f"workdir={copy}", *args[3:], "-o", f"evaluate.tasks=[{', '.join(tasks)}]",
                "-o", "evaluate.shots=1", "-o", "evaluate.max_examples=3", "-o", "evaluate.num_workers=1")
    result = pretrain_cli("run", *run_args, "--from", "evaluate")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]

    (evaluate_dir,) = [p.parent for p in copy.glob("evaluate/*/results.json")
                       if "multi30k_en_de_e2e" in p.read_text()]
    results = json.loads((evaluate_dir / "results.json").read_text())
    bleu = results["multi30k_en_de_e2e"]["scores"]["bleu"]
    assert bleu["signature"].startswith("nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0")
    assert bleu["baseline_kind"].startswith("copy the source") and bleu["baseline"] >= 0
    assert bleu["ci95"] is not None and results["multi30k_en_de_e2e"]["num_examples"] == 3
    assert set(results["dialogsum_tldr_e2e"]["scores"]) == {"rouge1", "rouge2", "rougeL", "rougeLsum"}
    texts = evaluate_dir / "texts" / "multi30k_en_de_e2e"
    cli = subprocess.run([str(Path(sys.executable).parent / "sacrebleu"), str(texts / "ref.txt"), "-i",
                          str(texts / "hyp.txt"), "-w", "6", "-b"], check=True, capture_output=True, text=True)
    assert float(cli.stdout) == round(bleu["value"], 6)

    status = pretrain_cli("status", str(copy), "--wide")
    assert status.returncode == 0, status.stderr[-2000:]
    assert "multi30k_en_de_e2e/bleu" in status.stdout and "dialogsum_tldr_e2e/rougeL" in status.stdout
    report_md = max(copy.glob("report/*/report.md"), key=lambda p: p.stat().st_mtime)  # the re-run's
    report = report_md.read_text(encoding="utf-8")
    assert "multi30k_en_de_e2e" in report and "bleu" in report and "rougeLsum" in report
