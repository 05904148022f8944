"""Files a finished task leaves behind, and the fine-tuned model round trip."""

from __future__ import annotations

import csv

import numpy as np
import torch

from stages.finetune.glue.examples import TaskExamples
from stages.finetune.glue.outputs import (
    prediction_strings, predictions_from_outputs, write_dev_predictions, write_submission,
)
from stages.finetune.outputs import is_task_finished, read_task_metrics, write_task_metrics
from stages.finetune.saved_model import load_finetuned, save_finetuned
from stages.finetune.tasks import get_task
from stages.models import GPT, GPTConfig, GPTForSequenceClassification


def read_tsv(path):
    with open(path, encoding="utf-8", newline="") as f:
        return list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))


def test_classification_outputs_become_label_strings(tmp_path):
    rte = get_task("rte")
    predictions = predictions_from_outputs(rte, np.array([[2.0, -1.0], [0.0, 3.0], [1.0, 0.5]]))
    assert predictions.tolist() == [0, 1, 0]
    examples = TaskExamples(texts=[("a", "b")] * 3, labels=None, ids=["7", "8", "9"])
    path = write_submission(tmp_path, rte, examples, predictions)
    assert path.name == "RTE.tsv"
    assert read_tsv(path) == [["index", "prediction"], ["7", "entailment"], ["8", "not_entailment"],
                              ["9", "entailment"]]


def test_sst2_dev_predictions_have_index_prediction_label(tmp_path):
    sst2 = get_task("sst2")
    dev = TaskExamples(texts=[("good",), ("bad",)], labels=np.array([1, 0]), ids=["0", "1"])
    write_dev_predictions(tmp_path / "dev_predictions.tsv", sst2, dev, np.array([1, 1]))
    assert read_tsv(tmp_path / "dev_predictions.tsv") == [["index", "prediction", "label"],
                                                          ["0", "1", "1"], ["1", "1", "0"]]


def test_regression_scores_are_clipped_to_the_task_range():
    stsb = get_task("stsb")
    scores = predictions_from_outputs(stsb, np.array([[-0.5], [2.25], [7.0]]))
    assert prediction_strings(stsb, scores) == ["0.000", "2.250", "5.000"]


def test_metrics_file_marks_the_task_finished(tmp_path):
    assert not is_task_finished(tmp_path)
    write_task_metrics(tmp_path, {"accuracy": 0.75, "seconds": 1.5})
    assert is_task_finished(tmp_path)
    assert read_task_metrics(tmp_path) == {"accuracy": 0.75, "seconds": 1.5}
    assert [p.name for p in tmp_path.iterdir()] == ["metrics.json"]  # no temp file left


def test_finetuned_model_round_trip(tmp_path):
    torch.manual_seed(0)
    backbone = GPT(GPTConfig(vocab_size=50, max_seq_len=16, num_layers=1, hidden_size=16, num_heads=2))
    model = GPTForSequenceClassification(backbone, num_labels=2).eval()
    (tmp_path / "tokenizer.json").write_text("{}")
    head_config = {"head": "sequence_classification", "task": "sst2", "num_labels": 2, "labels": ["0", "1"]}
    save_finetuned(model, tmp_path / "model", head_config=head_config, tokenizer_path=tmp_path / "tokenizer.json")
    loaded, loaded_config = load_finetuned(tmp_path / "model")
    assert loaded_config == head_config and (tmp_path / "model" / "tokenizer.json").is_file()
    input_ids = torch.randint(0, 50, (3, 16))
    mask = torch.ones(3, 16, dtype=torch.long)
    mask[0, 10:] = 0
    with torch.no_grad():
        assert torch.equal(loaded(input_ids, mask)[0], model(input_ids, mask)[0])
