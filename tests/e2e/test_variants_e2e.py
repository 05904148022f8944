"""The lectures' variants through every stage of the real CLI, each from its own tiny
config: ALBERT (factorized embeddings, shared layers, sentence order), ELECTRA
(replaced-token detection), SpanBERT (span masking + the span boundary objective) and the
original Transformer (post-LN encoder-decoder, span corruption, text-to-text fine-tuning).

The configs run as shipped except for size: a few steps, one worker per stage, a few
dozen fine-tuning examples and a handful of evaluation examples. The runs share one
workdir, so the configs that read the same books reuse one ingest (by fingerprint).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.e2e.cli import pretrain_cli

pytestmark = [pytest.mark.e2e, pytest.mark.ray]
STAGES = ("ingest", "tokenizer", "dataset", "pretrain", "finetune", "evaluate", "report")
SMALL = ("pretrain.max_steps=4", "pretrain.warmup_steps=1", "pretrain.eval_every=4", "pretrain.checkpoint_every=4",
         "pretrain.num_workers=1", "finetune.num_workers=1", "finetune.max_train_examples=32",
         "finetune.max_eval_examples=32", "finetune.max_test_examples=8", "evaluate.num_workers=1",
         "evaluate.tasks=[copa]", "evaluate.shots=0", "evaluate.max_examples=4")
# config -> the objective parts pretraining must log (validation metrics val_<part>_loss)
VARIANTS = {
    "albert-tiny": ("mlm", "sop"),
    "electra-tiny": ("mlm", "rtd"),
    "spanbert-tiny": ("mlm", "sbo"),
    "transformer-tiny": ("span",),
}


@pytest.fixture(scope="module")
def shared_workdir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("variants") / "workdir"


@pytest.mark.parametrize("config", list(VARIANTS))
def test_variant_runs_every_stage(config, shared_workdir, ray_address):
    overrides = [f"workdir={shared_workdir}", f"ray.address={ray_address}", *SMALL]
    args = [f"configs/{config}.yaml", *(part for key in overrides for part in ("-o", key))]
    result = pretrain_cli("run", *args)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    for stage in STAGES:
        assert f"[{stage}] done" in result.stdout or f"[{stage}] cached" in result.stdout, (stage, result.stdout[-2000:])

    pretrain = manifest(shared_workdir, "pretrain", result.stdout)["metrics"]
    assert pretrain["steps"] == 4
    for part in VARIANTS[config]:
        assert f"val_{part}_loss" in pretrain, sorted(pretrain)
    finetune = manifest(shared_workdir, "finetune", result.stdout)["metrics"]
    assert 0 <= finetune["sst2/accuracy"] <= 1
    evaluate = manifest(shared_workdir, "evaluate", result.stdout)["metrics"]
    assert any(key.startswith("copa") for key in evaluate), sorted(evaluate)
    report = next((shared_workdir / "report" / fingerprint(result.stdout, "report")).glob("report.md"))
    assert "| pretrain | done |" in report.read_text()


def fingerprint(stdout: str, stage: str) -> str:
    """The stage's fingerprint from the CLI's `[stage] running (<fingerprint>)` line."""
    line = next(line for line in stdout.splitlines() if line.startswith(f"[{stage}] running ("))
    return line.split("(", 1)[1].split(")", 1)[0]


def manifest(workdir: Path, stage: str, stdout: str) -> dict:
    return json.loads((workdir / stage / fingerprint(stdout, stage) / "manifest.json").read_text())
