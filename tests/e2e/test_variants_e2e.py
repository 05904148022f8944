"""The lectures' variants through every stage of the real CLI, each from its own tiny
config: ALBERT (factorized embeddings, shared layers, sentence order), ELECTRA
(replaced-token detection), SpanBERT (span masking + the span boundary objective) and the
original Transformer (post-LN encoder-decoder, span corruption, text-to-text fine-tuning).

The configs run as shipped except for size: a few steps, one worker per stage, a few
dozen fine-tuning examples and a handful of evaluation examples. Each run has its own
workdir and all four name one `store`, so the configs that read the same books reuse one
ingest, and the three WordPiece ones one tokenizer (by fingerprint). They run two at a
time (`--wait-lock`: a run reaching a stage the other is writing waits for it and reuses
it): most of a run is Ray Train workers starting, which leaves part of the two cores
idle (measured alone: 163 s for the four, against 216-271 s one after another in the suite).
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
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


# Started in this order, two at a time: albert-tiny writes the ingest and the WordPiece
# tokenizer while transformer-tiny waits for the ingest, then writes its Unigram one.
START_ORDER = ("albert-tiny", "transformer-tiny", "electra-tiny", "spanbert-tiny")


@pytest.fixture(scope="module")
def variant_runs(tmp_path_factory, ray_address) -> tuple[Path, dict]:
    """Every variant's `pretrain run`, two at a time; returns the store and each run's result."""
    root = tmp_path_factory.mktemp("variants")
    store = root / "store"

    def run(config: str):
        overrides = [f"workdir={root / config}", f"store={store}", f"ray.address={ray_address}", *SMALL]
        args = [f"configs/{config}.yaml", *(part for key in overrides for part in ("-o", key)), "--wait-lock"]
        return pretrain_cli("run", *args)

    assert sorted(START_ORDER) == sorted(VARIANTS)
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = dict(zip(START_ORDER, pool.map(run, START_ORDER)))
    return store, results


@pytest.mark.parametrize("config", list(VARIANTS))
def test_variant_runs_every_stage(config, variant_runs):
    store, results = variant_runs
    result = results[config]
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    for stage in STAGES:
        assert f"[{stage}] done" in result.stdout or f"[{stage}] cached" in result.stdout, (stage, result.stdout[-2000:])

    pretrain = manifest(store, "pretrain", result.stdout)["metrics"]
    assert pretrain["steps"] == 4
    for part in VARIANTS[config]:
        assert f"val_{part}_loss" in pretrain, sorted(pretrain)
    finetune = manifest(store, "finetune", result.stdout)["metrics"]
    assert 0 <= finetune["sst2/accuracy"] <= 1
    evaluate = manifest(store, "evaluate", result.stdout)["metrics"]
    assert any(key.startswith("copa") for key in evaluate), sorted(evaluate)
    report = next((store / "report" / fingerprint(result.stdout, "report")).glob("report.md"))
    assert "| pretrain | done |" in report.read_text()
    # One ingest for all four, one tokenizer per kind (WordPiece x 3, Unigram), in the store.
    assert len(list((store / "ingest").glob("*/manifest.json"))) == 1
    assert len(list((store / "tokenizer").glob("*/manifest.json"))) == 2


def fingerprint(stdout: str, stage: str) -> str:
    """The stage's fingerprint from the CLI's `[stage] running (<fingerprint>)` line."""
    line = next(line for line in stdout.splitlines() if line.startswith(f"[{stage}] running ("))
    return line.split("(", 1)[1].split(")", 1)[0]


def manifest(workdir: Path, stage: str, stdout: str) -> dict:
    return json.loads((workdir / stage / fingerprint(stdout, stage) / "manifest.json").read_text())


# config -> (generate arguments, what the JSON record must hold): each family's way of
# generating, from the run's own model/ (in the store the runs share), in this process.
GENERATE = {
    "albert-tiny": (("--prompt", "It was a dark and [MASK] night."), "masks"),
    "electra-tiny": (("--prompt", "It was a dark and [MASK] night."), "masks"),  # by its generator
    "spanbert-tiny": (("--prompt", "It was a dark and [MASK] night."), "masks"),
    "transformer-tiny": (("--prompt", "It was a dark and", "--max-new-tokens", "5"), "source"),
}


@pytest.mark.parametrize("config", list(GENERATE))
def test_generate_from_each_variant(config, variant_runs, capsys):
    from cluster.cli import main

    store, _ = variant_runs
    args, key = GENERATE[config]
    assert main(["generate", str(store.parent / config), *args, "--json", "--device", "cpu"]) == 0
    (record,) = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert key in record
    if config == "transformer-tiny":  # and its fine-tuned SST-2 model, text to text
        assert main(["generate", str(store.parent / config), "--task", "sst2", "--prompt", "a gripping film",
                     "--json", "--device", "cpu"]) == 0
        (task,) = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
        assert task["source"] == "sst2 sentence: a gripping film" and task["new_tokens"] <= 8
