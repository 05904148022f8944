"""Snapshots across training: the folders and index.json the pretrain stage writes
(stages/pretrain/snapshots.py), and stages/evaluate/snapshots.score_snapshots, which scores
every listed snapshot exactly as the evaluate stage scores one model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from stages.evaluate.evaluate_task import evaluate_task
from stages.evaluate.scorers import load_scorer
from stages.evaluate.snapshots import score_snapshots
from stages.evaluate.spec import resolve_task_spec
from stages.models import load_pretrained
from stages.pretrain.snapshots import (
    read_snapshot_index,
    record_snapshot,
    remove_partial_snapshots,
    snapshot_path,
    write_model_folder,
)
from tests.support.pretrained_dirs import write_pretrained

GPT = {"num_layers": 2, "hidden_size": 32, "num_heads": 2}
TOKENS_PER_STEP = 4096
SEED, MAX_EXAMPLES = 1234, 6


@pytest.fixture(scope="module")
def pretrain_dir(tmp_path_factory) -> Path:
    """A pretrain stage's output folder with snapshots at steps 10 and 20 (two different
    random GPTs), written by the functions the training loop uses, step 20 first."""
    root = write_pretrained(tmp_path_factory.mktemp("pretrain"), "gpt", GPT, vocab_size=600, max_seq_len=64)
    tokenizer_path = root / "model" / "tokenizer.json"
    early = load_pretrained(root / "model")
    late = load_pretrained(root / "model")
    with torch.no_grad():
        for parameter in late.parameters():
            parameter.mul_(3.0)  # peaked predictions: other scores than the early model's
    for step, model in ((20, late), (10, early)):
        write_model_folder(model, tokenizer_path, snapshot_path(root, step))
        record_snapshot(root, step, step * TOKENS_PER_STEP)
    return root


def test_snapshots_hold_what_model_holds_and_the_index_lists_them_in_step_order(pretrain_dir):
    folder = snapshot_path(pretrain_dir, 10)
    assert folder.name == "step-0000010"
    assert sorted(p.name for p in folder.iterdir()) == sorted(p.name for p in (pretrain_dir / "model").iterdir())
    assert (folder / "model.safetensors").read_bytes() == (pretrain_dir / "model" / "model.safetensors").read_bytes()
    assert read_snapshot_index(pretrain_dir) == [
        {"step": 10, "tokens": 10 * TOKENS_PER_STEP, "path": "snapshots/step-0000010"},
        {"step": 20, "tokens": 20 * TOKENS_PER_STEP, "path": "snapshots/step-0000020"},
    ]
    assert not list((pretrain_dir / "snapshots").glob("*.partial"))


def test_a_step_already_recorded_keeps_its_entry(tmp_path):
    record_snapshot(tmp_path, 5, 100)
    record_snapshot(tmp_path, 5, 999)  # a resumed run passing the same step again
    record_snapshot(tmp_path, 3, 60)
    index = json.loads((tmp_path / "snapshots" / "index.json").read_text())
    assert [(e["step"], e["tokens"]) for e in index] == [(3, 60), (5, 100)]


def test_half_written_snapshots_are_removed_and_never_listed(pretrain_dir, tmp_path):
    model = load_pretrained(pretrain_dir / "model")
    write_model_folder(model, pretrain_dir / "model" / "tokenizer.json", snapshot_path(tmp_path, 1))
    killed = snapshot_path(tmp_path, 2).with_name("step-0000002.partial")
    killed.mkdir()
    (killed / "model.safetensors").write_bytes(b"half")
    (tmp_path / "snapshots" / "index.json.partial").write_text("[")
    remove_partial_snapshots(tmp_path)
    assert sorted(p.name for p in (tmp_path / "snapshots").iterdir()) == ["step-0000001"]
    assert read_snapshot_index(tmp_path) == []  # written folders are listed by record_snapshot only


# A perplexity task over short passages (the built-in ones score whole articles or books:
# seconds each for a unit test).
PASSAGE_PERPLEXITY = """
name: passages
kind: perplexity
splits:
  test: {path: eval/lambada/lambada_test.jsonl, format: jsonl}
eval_split: test
doc_to_target: text
metrics: [word_perplexity, bits_per_byte]
"""


def test_score_snapshots_scores_each_snapshot_as_the_evaluate_stage_would(pretrain_dir, data_dir, tmp_path):
    (tmp_path / "passages.yaml").write_text(PASSAGE_PERPLEXITY)
    tasks = [(resolve_task_spec("lambada_openai"), 0), (resolve_task_spec("copa"), 2),
             (resolve_task_spec(tmp_path / "passages.yaml"), 2)]  # perplexity takes no demonstrations: shots ignored
    rows = score_snapshots(pretrain_dir, tasks, data_dir, seed=SEED, max_examples=MAX_EXAMPLES, batch_size=8,
                           max_length=None)
    assert [(r["step"], r["task"]) for r in rows][:1] == [(10, "lambada_openai")]
    assert {(r["step"], r["tokens"]) for r in rows} == {(10, 10 * TOKENS_PER_STEP), (20, 20 * TOKENS_PER_STEP)}
    assert [r["step"] for r in rows] == sorted(r["step"] for r in rows)
    for step in (10, 20):
        scorer = load_scorer(snapshot_path(pretrain_dir, step), batch_size=8)
        expected = []
        for spec, shots in tasks:
            report = evaluate_task(spec, data_dir, scorer, shots=0 if spec.kind == "perplexity" else shots,
                                   seed=SEED, max_examples=MAX_EXAMPLES)
            expected += [(spec.name, metric, score.value, score.baseline, score.higher_is_better)
                         for metric, score in report.scores.items()]
        got = [(r["task"], r["metric"], r["value"], r["baseline"], r["higher_is_better"])
               for r in rows if r["step"] == step]
        assert got == expected
    for row in rows:
        assert set(row) == {"step", "tokens", "task", "metric", "value", "ci95", "baseline", "higher_is_better"}
        assert row["ci95"] is None or row["ci95"][0] <= row["value"] <= row["ci95"][1]
    perplexity = {r["step"]: r["value"] for r in rows if r["metric"] == "word_perplexity"}
    assert perplexity[10] != perplexity[20]  # each snapshot's own weights were scored


def test_score_snapshots_explains_missing_snapshots(tmp_path, pretrain_dir, data_dir):
    tasks = [(resolve_task_spec("copa"), 0)]
    with pytest.raises(FileNotFoundError, match="lists no snapshots: .*pretrain.snapshot_every"):
        score_snapshots(tmp_path, tasks, data_dir, seed=SEED, max_examples=2, batch_size=8, max_length=None)
    record_snapshot(tmp_path, 7, 70)
    with pytest.raises(FileNotFoundError, match="lists step 7 at .*step-0000007, which does not exist"):
        score_snapshots(tmp_path, tasks, data_dir, seed=SEED, max_examples=2, batch_size=8, max_length=None)


def test_the_evaluate_stage_with_snapshots_true_scores_every_snapshot(pretrain_dir, data_dir, tmp_path):
    """evaluate.snapshots: true through the stage function (its Ray tasks in this process):
    snapshots.json holds each snapshot's scores on the configured tasks and shots, as
    score_snapshots gives them, and the manifest's metrics count the snapshots."""
    from pipeline.config import ExperimentConfig
    from pipeline.context import StageContext
    from stages.evaluate.config import EvaluateConfig
    from stages.evaluate.run import run as run_evaluate
    from stages.ray_tasks import run_in_process

    config = EvaluateConfig(tasks=["lambada_openai", "copa"], shots={"copa": 2}, seed=SEED,
                            max_examples=MAX_EXAMPLES, batch_size=8, snapshots=True)
    experiment = ExperimentConfig.model_validate(
        {"name": "t", "data_dir": str(data_dir), "ingest": {"sources": [{"path": "x"}]},
         "evaluate": config.model_dump()})
    ctx = StageContext(name="evaluate", config=config, experiment=experiment, output_dir=tmp_path,
                       inputs={"pretrain": pretrain_dir}, fingerprint="test")
    with run_in_process():
        metrics = run_evaluate(ctx)
    assert metrics["snapshots_scored"] == 2
    rows = json.loads((tmp_path / "snapshots.json").read_text())
    assert {(r["step"], r["task"]) for r in rows} == {(step, task) for step in (10, 20)
                                                      for task in ("lambada_openai", "copa")}
    expected = score_snapshots(pretrain_dir, [(resolve_task_spec("lambada_openai"), 0),
                                              (resolve_task_spec("copa"), 2)],
                               data_dir, seed=SEED, max_examples=MAX_EXAMPLES, batch_size=8, max_length=None)
    assert rows == json.loads(json.dumps(expected, default=float))
    by_step = {r["step"]: r["value"] for r in rows if r["task"] == "lambada_openai" and r["metric"] == "perplexity"}
    assert by_step[10] != by_step[20]  # each snapshot's own weights


def test_a_snapshot_with_the_scored_models_weights_reuses_its_reports(pretrain_dir, data_dir):
    """The snapshot whose weights equal model/ (step 10 here; the final step in a real
    run) takes the reports passed as `scored_model` instead of being scored again: given
    the late model's reports, step 10 shows them, and step 20 is still scored."""
    tasks = [(resolve_task_spec("copa"), 0)]
    late_scorer = load_scorer(snapshot_path(pretrain_dir, 20), batch_size=8)
    late_reports = [evaluate_task(spec, data_dir, late_scorer, shots=shots, seed=SEED, max_examples=MAX_EXAMPLES)
                    for spec, shots in tasks]
    rows = score_snapshots(pretrain_dir, tasks, data_dir, seed=SEED, max_examples=MAX_EXAMPLES, batch_size=8,
                           max_length=None, scored_model=(pretrain_dir / "model", late_reports))
    values = {(r["step"], r["metric"]): r["value"] for r in rows}
    late = {metric: score.value for metric, score in late_reports[0].scores.items()}
    assert {metric: values[(10, metric)] for metric in late} == late
    assert {metric: values[(20, metric)] for metric in late} == late  # scored: the same weights as late
    honest = score_snapshots(pretrain_dir, tasks, data_dir, seed=SEED, max_examples=MAX_EXAMPLES, batch_size=8,
                             max_length=None)
    assert [r for r in honest if r["step"] == 20] == [r for r in rows if r["step"] == 20]


def test_the_manifests_digests_are_read_instead_of_hashing_the_weights_again(pretrain_dir, data_dir):
    """With the pretrain manifest's sha256 per file given, those decide which snapshot
    holds the scored model's weights (here they say step 20, not step 10, does)."""
    tasks = [(resolve_task_spec("copa"), 0)]
    scorer = load_scorer(pretrain_dir / "model", batch_size=8)
    reports = [evaluate_task(spec, data_dir, scorer, shots=shots, seed=SEED, max_examples=MAX_EXAMPLES)
               for spec, shots in tasks]
    digests = {"model/model.safetensors": "a", "snapshots/step-0000010/model.safetensors": "b",
               "snapshots/step-0000020/model.safetensors": "a"}
    rows = score_snapshots(pretrain_dir, tasks, data_dir, seed=SEED, max_examples=MAX_EXAMPLES, batch_size=8,
                           max_length=None, scored_model=(pretrain_dir / "model", reports),
                           recorded_digests=digests)
    honest = score_snapshots(pretrain_dir, tasks, data_dir, seed=SEED, max_examples=MAX_EXAMPLES, batch_size=8,
                             max_length=None)
    reused = {metric: score.value for metric, score in reports[0].scores.items()}
    assert {r["metric"]: r["value"] for r in rows if r["step"] == 20} == reused
    assert {r["metric"]: r["value"] for r in honest if r["step"] == 20} != reused
