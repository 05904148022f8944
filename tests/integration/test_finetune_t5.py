"""A T5 pretrained by the pipeline, fine-tuned as text to text through the finetune stage
on real Ray Train + DeepSpeed (2 CPU workers): SST-2 sources with the task prefix, label
words decoded greedily, scored as classes; the GLUE files hold labels, and the saved
model generates what the dev predictions say."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest
import torch

from pipeline.config import ExperimentConfig
from pipeline.context import StageContext
from stages.finetune.run import run
from stages.finetune.saved_model import load_finetuned
from stages.finetune.tasks import get_task
from stages.finetune.tasks.tsv import read_split
from stages.finetune.text_to_text import class_ids, encode_text_to_text
from stages.finetune.encode import load_task_tokenizer
from stages.models import build_model, save_pretrained
from stages.tokenizer.config import TokenizerConfig
from stages.tokenizer.recipes import build_recipe, build_tokenizer, finish_tokenizer

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


def test_t5_sst2_text_to_text(ray_session, tmp_path, t5_pretrain_dir, data_dir):
    experiment = ExperimentConfig.model_validate({
        "name": "finetune-t5-test", "data_dir": str(data_dir), "seed": 0,
        "ingest": {"sources": [{"path": "unused: only finetune runs here"}]},
        "finetune": {"tasks": ["sst2"], "max_train_examples": 96, "max_eval_examples": 64, "epochs": 1,
                     "num_workers": 2, "micro_batch_size": 16, "max_seq_len": SEQ_LEN, "lr": 1e-3,
                     "max_failures": 0},
    })
    ctx = StageContext(name="finetune", config=experiment.finetune, experiment=experiment, output_dir=tmp_path,
                       inputs={"pretrain": t5_pretrain_dir}, fingerprint="test")
    metrics = run(ctx)
    assert 0.0 <= metrics["sst2/accuracy"] <= 1.0 and metrics["sst2/dev_examples"] == 64
    with open(tmp_path / "sst2" / "SST-2.tsv", encoding="utf-8", newline="") as f:
        submission = list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
    assert len(submission) - 1 == 1821 and {row[1] for row in submission[1:]} <= {"0", "1"}
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
        written = [row[1] for row in list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))[1:17]]
    assert [str(max(int(i), 0)) for i in predicted] == written
