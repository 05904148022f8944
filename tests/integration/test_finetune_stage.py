"""The finetune stage end to end on real Ray Train + DeepSpeed (2 workers, CPU, gloo):
a tiny random GPT saved as the pretrain stage would, a tokenizer trained here with the
pipeline's own recipe, SST-2 with 200 training examples and the full dev and test sets.
Then: a re-run skips the finished task, and a task whose outputs were lost resumes from
its last checkpoint instead of training again. STS-B covers sentence pairs and regression.
SST-2 runs with wandb offline: its curves (train loss, lr, dev accuracy per epoch) are in
metrics.jsonl and in the task's own offline wandb run. Each task has its own fingerprint:
another stage directory whose config differs only in the task list reuses the finished
SST-2. CoNLL-2003 and SQuAD (the GPT's token and span heads), one worker each, train at
the same time on the 2 CPUs.
"""

from __future__ import annotations

import csv
import json
import math
import shutil
import threading
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from pipeline.config import ExperimentConfig
from pipeline.context import StageContext
from stages.finetune.encode import encode_texts, load_task_tokenizer
from stages.finetune.glue.reader import read_split
from stages.finetune.run import run
from stages.finetune.saved_model import load_finetuned
from stages.finetune.squad.family import sample, squad_splits
from stages.finetune.tasks import get_task
from stages.models import build_model, save_pretrained
from stages.tokenizer.config import TokenizerConfig
from stages.tokenizer.recipes import build_recipe, build_tokenizer
from tests.support.finetune_pins import assert_pinned
from tests.support.hf_export_checks import assert_classifier_matches, assert_reader_matches, assert_tagger_matches
from tests.support.wandb_offline import offline_log

pytestmark = pytest.mark.ray

SEQ_LEN = 64
FINETUNE = dict(max_train_examples=200, epochs=2, num_workers=2, micro_batch_size=16,
                max_seq_len=SEQ_LEN, log_every=5, max_failures=0)


@pytest.fixture(scope="module")
def pretrain_dir(tmp_path_factory, data_dir) -> Path:
    """What the pretrain stage leaves: model/{model.safetensors, model_config.json, tokenizer.json}."""
    root = tmp_path_factory.mktemp("pretrain")
    sentences = [t[0] for t in read_split(get_task("sst2"), data_dir, "train").texts[:400]]
    recipe = build_recipe(TokenizerConfig(vocab_size=1000, min_frequency=1))
    tokenizer = build_tokenizer(recipe)
    tokenizer.train_from_iterator(sentences, trainer=recipe.trainer)
    torch.manual_seed(0)
    model = build_model({"family": "gpt", "num_layers": 2, "hidden_size": 32, "num_heads": 4},
                        vocab_size=tokenizer.get_vocab_size(), max_seq_len=SEQ_LEN)
    save_pretrained(model, root / "model")
    tokenizer.save(str(root / "model" / "tokenizer.json"))
    return root


def make_context(output_dir: Path, pretrain_dir: Path, data_dir: Path, wandb_mode: str = "disabled",
                 **finetune) -> StageContext:
    experiment = ExperimentConfig.model_validate({
        "name": "finetune-test", "data_dir": str(data_dir), "seed": 0,
        "ingest": {"sources": [{"path": "unused: only finetune runs here"}]},
        "tracking": {"wandb": {"mode": wandb_mode, "project": "pp-tests"}},
        "finetune": {**FINETUNE, **finetune},
    })
    return StageContext(name="finetune", config=experiment.finetune, experiment=experiment,
                        output_dir=output_dir, inputs={"pretrain": pretrain_dir}, fingerprint="test")


@pytest.fixture(scope="module")
def sst2_run(ray_session, tmp_path_factory, pretrain_dir, data_dir):
    ctx = make_context(tmp_path_factory.mktemp("finetune"), pretrain_dir, data_dir, wandb_mode="offline",
                       tasks=["sst2"])
    return ctx, run(ctx)


@pytest.fixture
def ray_train_runs(monkeypatch) -> SimpleNamespace:
    """The Ray Train runs the stage starts during the test (stages.training.launch.fit,
    still run for real): their names, and the most that were under way at once. What the
    stage does, counted instead of timed (the machine is too noisy for timing)."""
    from stages.training import launch

    real_fit, lock = launch.fit, threading.Lock()
    runs = SimpleNamespace(names=[], under_way=0, most_at_once=0)

    def counted_fit(*args, **kwargs):
        with lock:
            runs.names.append(kwargs.get("run_name"))
            runs.under_way += 1
            runs.most_at_once = max(runs.most_at_once, runs.under_way)
        try:
            return real_fit(*args, **kwargs)
        finally:
            with lock:
                runs.under_way -= 1

    monkeypatch.setattr(launch, "fit", counted_fit)
    return runs


def read_tsv(path: Path) -> list[list[str]]:
    with open(path, encoding="utf-8", newline="") as f:
        return list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))


def test_sst2_metrics_are_returned_flat_and_written_per_task(sst2_run):
    ctx, metrics = sst2_run
    assert 0.0 <= metrics["sst2/accuracy"] <= 1.0
    assert metrics["sst2/train_examples"] == 200 and metrics["sst2/dev_examples"] == 872
    assert metrics["sst2/steps"] == 2 * math.ceil(100 / 16)  # 2 epochs, 100 rows per worker
    assert metrics["sst2/seconds"] > 0
    assert_pinned("gpt/sst2", ctx.output_dir, "sst2")
    written = json.loads((ctx.output_dir / "sst2" / "metrics.json").read_text())
    assert written["accuracy"] == metrics["sst2/accuracy"] and written["task"] == "sst2"
    # Next to the score: the majority class of the 872 dev labels (444 are "1") and a 95% interval.
    assert metrics["sst2/accuracy_baseline"] == 444 / 872
    assert metrics["sst2/accuracy_ci95_low"] < metrics["sst2/accuracy"] < metrics["sst2/accuracy_ci95_high"]
    assert "Wilson" in written["score_notes"]["accuracy"]


def test_sst2_prediction_files_cover_every_row(sst2_run, data_dir):
    ctx, metrics = sst2_run
    dev = read_tsv(ctx.output_dir / "sst2" / "dev_predictions.tsv")
    assert dev[0] == ["index", "prediction", "label"] and len(dev) == 1 + 872
    assert {row[1] for row in dev[1:]} <= {"0", "1"}
    assert sum(row[1] == row[2] for row in dev[1:]) / 872 == pytest.approx(metrics["sst2/accuracy"])
    test_rows = read_tsv(data_dir / "glue_data" / "SST-2" / "test.tsv")[1:]
    submission = read_tsv(ctx.output_dir / "sst2" / "SST-2.tsv")
    assert submission[0] == ["index", "prediction"] and len(submission) - 1 == len(test_rows)
    assert [row[0] for row in submission[1:]] == [row[0] for row in test_rows]


def test_training_loss_and_lr_are_logged_per_step(sst2_run):
    ctx, _ = sst2_run
    records = [r for r in ctx.metrics_log.read() if r.get("task") == "sst2" and "loss" in r]
    assert [r["step"] for r in records] == [5, 10, 14]  # every log_every steps and the last
    assert all(math.isfinite(r["loss"]) and r["lr"] > 0 for r in records)


def test_dev_scores_are_logged_per_epoch(sst2_run):
    ctx, metrics = sst2_run
    records = [r for r in ctx.metrics_log.read() if r.get("task") == "sst2" and "dev_accuracy" in r]
    assert [(r["step"], r["epoch"]) for r in records] == [(7, 0), (14, 1)]
    assert records[-1]["dev_accuracy"] == metrics["sst2/accuracy"]  # the last epoch's is the score


def test_the_task_streams_its_own_offline_wandb_run(sst2_run):
    ctx, _ = sst2_run
    # The first run of the task (a resume below opens another one).
    content = offline_log(ctx.output_dir / "sst2", [b"dev_accuracy"], which=0)
    assert b"finetune-test-finetune-sst2-test" in content  # experiment-stage-task-fingerprint
    assert all(key in content for key in (b"loss", b"lr", b"examples_per_s", b"dev_accuracy",
                                          b"train_examples"))
    assert not (ctx.output_dir / "wandb").exists()  # no stage-level run next to the task runs


def test_saved_model_reproduces_the_dev_predictions(sst2_run, data_dir):
    ctx, _ = sst2_run
    model, head_config = load_finetuned(ctx.output_dir / "sst2" / "model")
    assert head_config["labels"] == ["0", "1"]
    dev = read_split(get_task("sst2"), data_dir, "dev")
    tokenizer = load_task_tokenizer(ctx.output_dir / "sst2" / "model" / "tokenizer.json", SEQ_LEN)
    encoded = encode_texts(tokenizer, dev.texts[:64], None)
    with torch.no_grad():
        logits, _ = model(torch.from_numpy(encoded.input_ids.astype(np.int64)),
                          torch.from_numpy(encoded.attention_mask.astype(np.int64)))
    written = [row[1] for row in read_tsv(ctx.output_dir / "sst2" / "dev_predictions.tsv")[1:65]]
    assert [str(i) for i in logits.argmax(dim=1).tolist()] == written


def test_transformers_folder_classifies_dev_rows_as_the_stage_did(sst2_run, data_dir):
    """<task>/hf/ in transformers alone: GPT2ForSequenceClassification, batched with its pad id."""
    ctx, _ = sst2_run
    written = json.loads((ctx.output_dir / "sst2" / "metrics.json").read_text())
    assert written["hf_export"] == "hf"
    assert_classifier_matches(ctx.output_dir / "sst2", read_split(get_task("sst2"), data_dir, "dev").texts, rows=64)


def test_rerun_skips_a_finished_task(sst2_run, ray_train_runs):
    ctx, metrics = sst2_run
    again = run(ctx)
    assert ray_train_runs.names == []  # no Ray Train run was started
    assert again == metrics


def test_a_task_finished_in_another_stage_directory_is_reused(sst2_run, pretrain_dir, data_dir, ray_train_runs):
    ctx, metrics = sst2_run
    # What adding a task to finetune.tasks looks like: a new stage directory, a config
    # that differs in keys that do not change SST-2's results. (No other task is listed
    # here, to keep the test free of another training run.)
    other = make_context(ctx.output_dir.with_name(ctx.output_dir.name + "-more-tasks"), pretrain_dir, data_dir,
                         tasks=["sst2"], max_parallel_tasks=2, max_failures=1)
    copied_metrics = run(other)
    assert ray_train_runs.names == []  # copied, no Ray Train run
    assert copied_metrics == metrics
    assert (other.output_dir / "sst2" / "SST-2.tsv").read_text() == (ctx.output_dir / "sst2" / "SST-2.tsv").read_text()
    copied = [r for r in other.metrics_log.read() if r.get("task") == "sst2"]
    assert copied == [r for r in ctx.metrics_log.read() if r.get("task") == "sst2"] and copied
    # Otherwise the next test's lost outputs would be copied back from here.
    shutil.rmtree(other.output_dir)


def test_task_with_lost_outputs_resumes_from_its_checkpoint(sst2_run):
    ctx, metrics = sst2_run
    task_dir = ctx.output_dir / "sst2"
    dev_before = (task_dir / "dev_predictions.tsv").read_text()
    logged_before = ctx.metrics_log.read()
    for name in ("metrics.json", "dev_predictions.tsv", "SST-2.tsv", "model_outputs.npz"):
        (task_dir / name).unlink()
    resumed = run(ctx)
    # The final epoch's checkpoint holds the trained weights: same predictions, no new
    # training steps logged.
    assert resumed["sst2/accuracy"] == metrics["sst2/accuracy"]
    assert (task_dir / "dev_predictions.tsv").read_text() == dev_before
    loss_records = [r for r in ctx.metrics_log.read() if "loss" in r]
    assert loss_records == [r for r in logged_before if "loss" in r]


def test_stsb_pairs_and_regression(ray_session, tmp_path, pretrain_dir, data_dir):
    ctx = make_context(tmp_path, pretrain_dir, data_dir, tasks=["stsb"], max_train_examples=64,
                       max_test_examples=100, epochs=1, save_model=False)
    metrics = run(ctx)
    assert set(metrics) >= {"stsb/pearson", "stsb/spearman"}
    assert -1.0 <= metrics["stsb/pearson"] <= 1.0 and -1.0 <= metrics["stsb/spearman"] <= 1.0
    submission = read_tsv(tmp_path / "stsb" / "STS-B.tsv")
    # finetune.max_test_examples: a seeded subset of the 1,379 test rows, in file order.
    full_test = read_tsv(data_dir / "glue_data" / "STS-B" / "test.tsv")
    indices = [row[0] for row in submission[1:]]
    assert len(indices) == 100 == metrics["stsb/test_examples"] and indices == sorted(indices, key=int)
    assert set(indices) < {row[0] for row in full_test[1:]}
    assert all(0.0 <= float(row[1]) <= 5.0 for row in submission[1:])
    assert not (tmp_path / "stsb" / "model").exists() and not (tmp_path / "stsb" / "hf").exists()
    assert json.loads((tmp_path / "stsb" / "metrics.json").read_text())["hf_export"] == (
        "not written: finetune.save_model is false, so there is no model/ to export")


def test_gpt_span_and_token_tasks_train_in_parallel(ray_session, tmp_path, pretrain_dir, data_dir, capsys,
                                                   ray_train_runs):
    """CoNLL-2003 (token head) and SQuAD v1.1 (span head) on the GPT, one worker each:
    both fit on the 2 CPUs, so they train at the same time. Their hf/ folders
    (GPT2ForTokenClassification, GPT2ForQuestionAnswering) predict what the stage wrote."""
    ctx = make_context(tmp_path, pretrain_dir, data_dir, tasks=["conll2003", "squad"], num_workers=1,
                       max_train_examples=32, max_eval_examples=24, epochs=1,
                       max_query_len=24, doc_stride=32)
    metrics = run(ctx)
    assert "training 2 tasks, 2 at a time: conll2003, squad" in capsys.readouterr().out
    assert 0.0 <= metrics["conll2003/f1"] <= 1.0 and 0.0 <= metrics["conll2003/test_f1"] <= 1.0
    assert 0.0 <= metrics["squad/exact_match"] <= metrics["squad/f1"] <= 1.0
    assert metrics["squad/dev_examples"] == 24 and metrics["squad/train_windows"] > 32  # contexts span windows
    conll_blocks = (tmp_path / "conll2003" / "dev_predictions.txt").read_text().split("\n\n")
    assert len([b for b in conll_blocks if b.strip()]) == 24
    predictions = json.loads((tmp_path / "squad" / "predictions.json").read_text())
    assert len(predictions) == 24 and all(isinstance(answer, str) for answer in predictions.values())
    assert {r["task"] for r in ctx.metrics_log.read() if "loss" in r} == {"conll2003", "squad"}
    assert_pinned("gpt/conll2003", tmp_path, "conll2003")
    assert_pinned("gpt/squad", tmp_path, "squad")
    assert_tagger_matches(tmp_path / "conll2003", rows=24)
    _, held_out, _ = squad_splits(get_task("squad"), data_dir, ctx.config.squad_eval_fraction, 0)
    assert_reader_matches(tmp_path / "squad", sample(held_out, 24, 0), ctx.config)
    # Both tasks' Ray Train runs were under way at the same time.
    assert sorted(ray_train_runs.names) == ["conll2003", "squad"] and ray_train_runs.most_at_once == 2
