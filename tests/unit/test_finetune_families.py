"""Task families (no Ray): the registry is the one place that picks a task's family, a T5
takes every task kind it has a text format for and refuses the others clearly, a
FinetuneJob is checked in the driver, each family lays out its batch labels, and the
workers' loss window logs exactly the mean of the losses it was given."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from stages.finetune.config import FinetuneConfig
from stages.finetune.conll.spec import ConllSpec
from stages.finetune.families.registry import FAMILIES, FAMILY_NAMES, family_for, family_named
from stages.finetune.glue.spec import TaskSpec
from stages.finetune.job import FinetuneJob
from stages.finetune.seq2seq.spec import Seq2SeqSpec
from stages.finetune.squad.spec import SquadSpec
from stages.finetune.tasks import get_task, task_names
from tests.support.engine_subprocess import run_engine_script

KIND_FAMILY = {TaskSpec: "glue", SquadSpec: "squad", ConllSpec: "conll", Seq2SeqSpec: "seq2seq"}


@pytest.mark.parametrize("model_family", ["gpt", "bert"])
def test_a_head_model_gets_the_family_of_its_task_kind(model_family):
    for name in task_names():
        spec = get_task(name)
        if isinstance(spec, Seq2SeqSpec) and model_family == "bert":  # no decoder: refused
            with pytest.raises(ValueError, match=f"task {name}: a BERT model is an encoder only"):
                family_for(spec, model_family)
            continue
        assert family_for(spec, model_family).name == KIND_FAMILY[type(spec)], name


def test_a_t5_fine_tunes_every_task_kind_as_text_to_text():
    # translation and summarization are text to text already: their own family (for GPT too)
    assert {family_for(get_task(name), "t5").name for name in task_names()
            if not isinstance(get_task(name), Seq2SeqSpec)} == {"text_to_text"}
    assert family_for(get_task("multi30k_en_de"), "t5").name == "seq2seq"


def test_a_t5_refuses_a_task_kind_without_a_text_format():
    pos = SimpleNamespace(name="pos")  # a task kind no family has a format for
    with pytest.raises(ValueError, match="pos: a T5 model fine-tunes GLUE, SQuAD and CoNLL-2003 tasks as text to "
                                         "text, and has no format for this one; remove it from finetune.tasks"):
        family_for(pos, "t5")
    with pytest.raises(ValueError, match="task pos: no task family fine-tunes a SimpleNamespace on a gpt model"):
        family_for(pos, "gpt")


def test_families_are_found_by_their_unique_names():
    assert len(set(FAMILY_NAMES)) == len(FAMILIES)
    assert all(family_named(family.name) is family for family in FAMILIES)
    with pytest.raises(ValueError, match="unknown task family 'glu'; known: seq2seq, text_to_text, squad, conll, glue"):
        family_named("glu")


def job(**changes) -> FinetuneJob:
    fields = dict(task="sst2", family="glue", seed=0, config=FinetuneConfig(), head_config={}, source={},
                  data=None, predict_splits=("dev", "test"), task_dir="/abs/sst2", metrics_log=None,
                  scorers={"dev": len}, tracking=None, primary_metric="accuracy")
    return FinetuneJob(**{**fields, **changes})


def test_a_bad_job_fails_in_the_driver():
    assert job().family == "glue"
    with pytest.raises(ValueError, match="task sst2: unknown task family 'gleu'; known: seq2seq, text_to_text, squad"):
        job(family="gleu")
    with pytest.raises(ValueError, match="must include 'dev'"):
        job(predict_splits=("test",), scorers={})
    with pytest.raises(ValueError, match=r"scorers for \['test'\], which are not in predict_splits"):
        job(predict_splits=("dev",), scorers={"dev": len, "test": len})
    with pytest.raises(ValueError, match="must be absolute"):
        job(task_dir="runs/sst2")
    with pytest.raises(AttributeError):  # frozen: no worker changes what the others see
        job().seed = 1


def test_each_family_lays_out_its_batch_labels():
    spans = torch.tensor([[3, 5], [0, 0]])  # (B, 2): answer start and end token
    assert {k: v.tolist() for k, v in family_named("squad").batch_labels(spans).items()} == {
        "start_positions": [3, 0], "end_positions": [5, 0]}
    targets = torch.tensor([[7, 1, -100]])  # a T5's target ids, whatever the task kind
    for name in ("glue", "conll", "text_to_text"):
        assert family_named(name).batch_labels(targets)["labels"] is targets


LOSS_WINDOW_SCRIPT = """
import json
import torch
import torch.distributed as dist
from stages.finetune.worker import _LossWindow

dist.init_process_group("gloo")
records = []
tracker = type("Tracker", (), {"log": lambda self, record, step: records.append((step, record))})()
window = _LossWindow(tracker, log_every=10, device=torch.device("cpu"))
losses = torch.rand(7, generator=torch.Generator().manual_seed(0)) * 3  # float32, as a model's loss
for loss in losses:
    window.add(loss, num_examples=4)
window.maybe_write(step=9, epoch=0, lr=1e-4, grad_norm=0.5, last=False)  # not a logging step
python_mean = 0.0
for loss in losses:
    python_mean += loss.item()  # the worker's old way: a host sync per micro batch
window.maybe_write(step=10, epoch=0, lr=1e-4, grad_norm=0.5, last=False)
print("RESULTS" + json.dumps({"records": records, "python_mean": python_mean / 7}))
"""


def test_the_loss_window_logs_the_exact_mean_and_the_gradient_norm():
    results = run_engine_script(LOSS_WINDOW_SCRIPT)
    [(step, record)] = results["records"]
    assert step == 10 and record["loss"] == results["python_mean"]  # bit for bit
    assert record["grad_norm"] == 0.5 and record["lr"] == 1e-4 and record["examples_per_s"] > 0
    assert list(record) == ["epoch", "loss", "lr", "examples_per_s", "grad_norm"]
