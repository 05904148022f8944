"""A T5 pretrained by the pipeline, fine-tuned as text to text through the finetune stage
on real Ray Train + DeepSpeed (CPU workers): SST-2 sources with the task prefix, label
words decoded greedily, scored as classes; the GLUE files hold labels, and the saved
model generates what the dev predictions say, and so does its hf/ folder in transformers
alone (T5ForConditionalGeneration with the task's generation_config.json). SQuAD and
CoNLL-2003: answer texts and entity lists generated, written in the official formats."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from pipeline.config import ExperimentConfig
from pipeline.context import StageContext
from stages.finetune.conll.family import sample_sentences
from stages.finetune.conll.reader import ENTITY_TYPES, read_conll
from stages.finetune.encode import load_task_tokenizer
from stages.finetune.glue.outputs import UNREADABLE
from stages.finetune.glue.rank import label_targets
from stages.finetune.glue.reader import read_split
from stages.finetune.glue.text_to_text import class_ids, encode_text_to_text
from stages.finetune.glue.text_to_text import source_texts
from stages.finetune.run import run
from stages.finetune.saved_model import load_finetuned
from stages.finetune.squad.family import sample, squad_splits
from stages.finetune.tasks import get_task
from stages.finetune.text_to_text.model import label_log_likelihoods
from stages.finetune.worker import OUTPUTS_NAME
from stages.models import build_model, save_pretrained
from stages.tokenizer.config import TokenizerConfig
from stages.tokenizer.recipes import build_recipe, build_tokenizer, finish_tokenizer
from tests.support.finetune_pins import assert_pinned
from tests.support.hf_export_checks import assert_generator_matches

pytestmark = pytest.mark.ray

SEQ_LEN = 48


@pytest.fixture(scope="module")
def t5_pretrain_dir(tmp_path_factory, data_dir) -> Path:
    """What the pretrain stage leaves for a T5: model/ with the family in model_config.json."""
    root = tmp_path_factory.mktemp("t5-pretrain")
    recipe = build_recipe(TokenizerConfig(kind="unigram", vocab_size=600, min_frequency=1))
    tokenizer = build_tokenizer(recipe)
    sentences = [t[0] for t in read_split(get_task("sst2"), data_dir, "train").texts[:2000]]
    tokenizer.train_from_iterator(sentences, trainer=recipe.trainer)
    torch.manual_seed(0)
    model = build_model({"family": "t5", "num_layers": 2, "hidden_size": 32, "num_heads": 2, "ff_size": 64},
                        vocab_size=tokenizer.get_vocab_size())
    save_pretrained(model, root / "model")
    finish_tokenizer(tokenizer, recipe).save(str(root / "model" / "tokenizer.json"))
    return root


def test_t5_sst2_and_stsb_text_to_text_under_zero3(ray_session, tmp_path, t5_pretrain_dir, data_dir):
    """Two ranks under ZeRO-3: parameters are gathered collectively in every decoder step,
    so prediction only finishes if both ranks generate the same number of steps."""
    experiment = ExperimentConfig.model_validate({
        "name": "finetune-t5-test", "data_dir": str(data_dir), "seed": 0,
        "ingest": {"sources": [{"path": "unused: only finetune runs here"}]},
        "finetune": {"tasks": ["sst2", "stsb"], "max_train_examples": 96, "max_eval_examples": 64,
                     "max_test_examples": 48, "epochs": 1,
                     "num_workers": 2, "zero_stage": 3, "micro_batch_size": 16, "max_seq_len": SEQ_LEN,
                     "lr": 1e-3, "max_failures": 0},
    })
    ctx = StageContext(name="finetune", config=experiment.finetune, experiment=experiment, output_dir=tmp_path,
                       inputs={"pretrain": t5_pretrain_dir}, fingerprint="test")
    metrics = run(ctx)
    assert 0.0 <= metrics["sst2/accuracy"] <= 1.0 and metrics["sst2/dev_examples"] == 64
    with open(tmp_path / "sst2" / "SST-2.tsv", encoding="utf-8", newline="") as f:
        submission = list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
    assert len(submission) - 1 == 48 and {row[1] for row in submission[1:]} <= {"0", "1"}
    assert [r["dev_accuracy"] for r in ctx.metrics_log.read() if "dev_accuracy" in r] == [metrics["sst2/accuracy"]]

    # The saved model, decoding greedily, predicts what the dev file says it did.
    model, head_config = load_finetuned(tmp_path / "sst2" / "model")
    dev = read_split(get_task("sst2"), data_dir, "dev").sample(64, 0)
    tokenizer_path = str(tmp_path / "sst2" / "model" / "tokenizer.json")
    encoded = encode_text_to_text(load_task_tokenizer(tokenizer_path, SEQ_LEN), get_task("sst2"), dev.texts[:16], None)
    with torch.no_grad():
        generated, _ = model(torch.from_numpy(encoded.input_ids.astype(np.int64)),
                             torch.from_numpy(encoded.attention_mask.astype(np.int64)))
    predicted = class_ids(get_task("sst2"), tokenizer_path, generated.numpy())
    with open(tmp_path / "sst2" / "dev_predictions.tsv", encoding="utf-8", newline="") as f:
        rows = list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
    assert rows[0] == ["index", "prediction", "label", "generation"]
    # A generation that is no label word is never written as a label.
    assert [UNREADABLE if i < 0 else str(i) for i in predicted] == [row[1] for row in rows[1:17]]
    unreadable = sum(row[1] == UNREADABLE for row in rows[1:])
    assert metrics["sst2/unreadable_predictions"] == unreadable
    assert metrics["sst2/unreadable_fraction"] == unreadable / 64
    # Each score carries its baseline (SST-2's majority class on these 64 rows) and interval.
    dev_labels = [row[2] for row in rows[1:]]
    assert metrics["sst2/accuracy_baseline"] == max(dev_labels.count("0"), dev_labels.count("1")) / 64
    assert metrics["sst2/accuracy_ci95_low"] <= metrics["sst2/accuracy"] <= metrics["sst2/accuracy_ci95_high"]

    # STS-B: a similarity score generated as text ("3.8"), read back as a float.
    assert -1.0 <= metrics["stsb/pearson"] <= 1.0 and metrics["stsb/dev_examples"] == 64
    with open(tmp_path / "stsb" / "STS-B.tsv", encoding="utf-8", newline="") as f:
        scores = [float(row[1]) for row in list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))[1:]]
    assert len(scores) == 48
    assert_pinned("t5/sst2", tmp_path, "sst2")
    assert_pinned("t5/stsb", tmp_path, "stsb")
    for task in ("sst2", "stsb"):
        dev_texts = read_split(get_task(task), data_dir, "dev").sample(64, 0).texts
        assert_generator_matches(tmp_path / task, source_texts(get_task(task), dev_texts), rows=16)


def test_t5_rank_scoring_under_zero3(ray_session, tmp_path, t5_pretrain_dir, data_dir):
    """finetune.t5_scoring: rank on two ranks under ZeRO-3 (every forward gathers
    parameters collectively, so both ranks must run as many; 33 dev rows do not split
    evenly): outputs are label-word log-likelihoods, equal to what the saved model gives
    in one process, and every prediction is a label."""
    experiment = ExperimentConfig.model_validate({
        "name": "finetune-t5-test", "data_dir": str(data_dir), "seed": 0,
        "ingest": {"sources": [{"path": "unused: only finetune runs here"}]},
        "finetune": {"tasks": ["sst2"], "max_train_examples": 32, "max_eval_examples": 33, "epochs": 1,
                     "num_workers": 2, "zero_stage": 3, "micro_batch_size": 16, "eval_batch_size": 8,
                     "max_seq_len": SEQ_LEN, "lr": 1e-3, "max_failures": 0, "t5_scoring": "rank"},
    })
    ctx = StageContext(name="finetune", config=experiment.finetune, experiment=experiment, output_dir=tmp_path,
                       inputs={"pretrain": t5_pretrain_dir}, fingerprint="test")
    metrics = run(ctx)
    assert 0.0 <= metrics["sst2/accuracy"] <= 1.0 and "sst2/unreadable_predictions" not in metrics
    with np.load(tmp_path / "sst2" / OUTPUTS_NAME) as outputs:
        dev_outputs = outputs["dev"]
    assert dev_outputs.shape == (33, 2) and (dev_outputs < 0).all()  # log-likelihoods
    with open(tmp_path / "sst2" / "dev_predictions.tsv", encoding="utf-8", newline="") as f:
        rows = list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
    assert [row[1] for row in rows[1:]] == [str(i) for i in dev_outputs.argmax(axis=1)]

    model, _ = load_finetuned(tmp_path / "sst2" / "model")
    dev = read_split(get_task("sst2"), data_dir, "dev").sample(33, 0)
    tokenizer_path = str(tmp_path / "sst2" / "model" / "tokenizer.json")
    encoded = encode_text_to_text(load_task_tokenizer(tokenizer_path, SEQ_LEN), get_task("sst2"), dev.texts[:8], None)
    with torch.no_grad():
        scores = label_log_likelihoods(model.eval().backbone, torch.from_numpy(encoded.input_ids.astype(np.int64)),
                                       torch.from_numpy(encoded.attention_mask.astype(np.int64)),
                                       torch.from_numpy(label_targets(get_task("sst2"), tokenizer_path)))
    np.testing.assert_allclose(scores.numpy(), dev_outputs[:8], rtol=1e-4, atol=1e-4)


def test_t5_squad_and_conll_text_to_text(ray_session, tmp_path, t5_pretrain_dir, data_dir):
    """SQuAD v1.1 (answer text out) and CoNLL-2003 (entity list out) through the real
    stage, one worker each so both train at once: the official-format files hold every
    scored question and word, whatever the tiny model generates."""
    experiment = ExperimentConfig.model_validate({
        "name": "finetune-t5-test", "data_dir": str(data_dir), "seed": 0,
        "ingest": {"sources": [{"path": "unused: only finetune runs here"}]},
        "finetune": {"tasks": ["squad", "conll2003"], "max_train_examples": 16, "max_eval_examples": 16,
                     "epochs": 1, "num_workers": 1, "micro_batch_size": 8, "max_seq_len": 96, "lr": 1e-3,
                     "max_failures": 0, "save_model": False},
    })
    ctx = StageContext(name="finetune", config=experiment.finetune, experiment=experiment, output_dir=tmp_path,
                       inputs={"pretrain": t5_pretrain_dir}, fingerprint="test")
    metrics = run(ctx)

    assert 0.0 <= metrics["squad/exact_match"] <= metrics["squad/f1"] <= 1.0
    _, held_out, _ = squad_splits(get_task("squad"), data_dir, experiment.finetune.squad_eval_fraction, 0)
    predictions = json.loads((tmp_path / "squad" / "predictions.json").read_text(encoding="utf-8"))
    assert set(predictions) == {e.id for e in sample(held_out, 16, 0)}
    assert all(isinstance(answer, str) for answer in predictions.values())
    squad_metrics = json.loads((tmp_path / "squad" / "metrics.json").read_text(encoding="utf-8"))
    assert "nbest_predictions.json" in squad_metrics["files_not_written"]
    assert not (tmp_path / "squad" / "nbest_predictions.json").exists()
    assert 0 <= squad_metrics["dev_answers_cut_off"] <= 16

    for split, file in (("dev", "valid.txt"), ("test", "test.txt")):
        sentences = sample_sentences(read_conll(data_dir / "conll2003" / file), 16, 0)
        lines = (tmp_path / "conll2003" / f"{split}_predictions.txt").read_text(encoding="utf-8").splitlines()
        rows = [line.split(" ") for line in lines if line]
        assert [row[0] for row in rows] == [w for words in sentences.words for w in words]  # one line per word
        assert [row[1] for row in rows] == [t for tags in sentences.tags for t in tags]
        assert all(len(row) == 3 and (row[2] == "O" or row[2][2:] in ENTITY_TYPES) for row in rows)
    for key in ("f1", "precision", "recall", "test_f1"):
        assert 0.0 <= metrics[f"conll2003/{key}"] <= 1.0
    assert metrics["conll2003/malformed_pieces"] >= 0 and metrics["conll2003/unmatched_entities"] >= 0
    for key in ("squad/exact_match", "squad/f1", "conll2003/f1", "conll2003/test_f1"):  # baselines, intervals
        assert metrics[f"{key}_ci95_low"] <= metrics[f"{key}_ci95_high"] and f"{key}_baseline" in metrics
    assert_pinned("t5/squad", tmp_path, "squad")
    assert_pinned("t5/conll2003", tmp_path, "conll2003")
