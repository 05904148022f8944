"""BERT (mlm + nsp, mlm + sop, mlm only) and T5 (span corruption) pretraining through the
real pretrain stage: Ray Train, 2 workers, DeepSpeed ZeRO-2 (ZeRO-3 for T5) on CPU, a dozen steps each.

The datasets are built by the real dataset stage from a small synthetic corpus with
tokenizers trained here (WordPiece for BERT, Unigram for T5). Each run must log its
per-objective metrics at every step, lower its loss, export model/ that scores the
validation rows exactly as the last evaluation did, and hf/ that transformers loads
with the same logits. The nsp run also tracks to wandb offline.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import transformers

from pipeline.context import StageContext
from stages.data.loader import ExampleLoader
from stages.data.parallel import run_in_process
from stages.models import BertForPreTraining, T5, load_pretrained
from stages.pretrain.config import PretrainConfig
from stages.pretrain.metrics import PartTotals, part_metrics
from stages.pretrain.objectives import build_objective
from stages.pretrain.run import run
from tests.unit.test_dataset_objectives import build, make_corpus, make_tokenizer
from tests.wandb_offline import offline_log

pytestmark = pytest.mark.ray

MAX_STEPS, EVAL_EVERY, EVAL_BATCHES, MICRO_BATCH = 12, 6, 2, 8
TRAINING = dict(num_workers=2, zero_stage=2, precision="fp32", micro_batch_size=MICRO_BATCH, lr=5e-3,
                warmup_steps=2, max_steps=MAX_STEPS, log_every=1, eval_every=EVAL_EVERY,
                eval_batches=EVAL_BATCHES, checkpoint_every=MAX_STEPS, max_failures=0)
BERT = {"family": "bert", "num_layers": 1, "hidden_size": 32, "num_heads": 2}
T5_MODEL = {"family": "t5", "num_layers": 1, "hidden_size": 32, "num_heads": 2, "ff_size": 64}
# name -> (tokenizer kind, dataset options, pretrain options, expected parts)
RUNS = {
    "mlm-nsp": ("wordpiece", {"objective": "mlm", "mlm": {"sentence_task": "nsp"}}, {"model": BERT},
                ("mlm", "nsp")),
    # Label smoothing in training; the validation metrics, rescored below without it, must match.
    "mlm-sop": ("wordpiece", {"objective": "mlm", "mlm": {"sentence_task": "sop", "masking": "static"}},
                {"model": BERT, "label_smoothing": 0.1}, ("mlm", "sop")),
    "mlm-only": ("wordpiece", {"objective": "mlm", "mlm": {"sentence_task": "none"}}, {"model": BERT}, ("mlm",)),
    # ZeRO-3 (parameters sharded; the tied T5 head gathered for export), and the whole
    # validation split, whose last global batch leaves a rank fewer rows or none.
    "span": ("unigram", {"objective": "span"}, {"model": T5_MODEL, "zero_stage": 3, "eval_batches": 100},
             ("span",)),
}
STEP_KEYS = {"loss", "lr", "grad_norm", "tokens_per_s", "samples_per_s", "mfu", "data_wait_s", "data_wait_share"}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("objectives-corpus")
    ingest = make_corpus(root, with_sentences=True)
    return {"root": root, "ingest": ingest,
            "wordpiece": make_tokenizer(root, "wordpiece", ingest),
            "unigram": make_tokenizer(root, "unigram", ingest)}


def pretrain(corpus: dict[str, Path], name: str, output_dir: Path, experiment=None) -> tuple[dict, Path]:
    kind, dataset_options, pretrain_options, _ = RUNS[name]
    dataset_dir = corpus["root"] / f"dataset-{name}"
    if not dataset_dir.is_dir():
        with run_in_process():  # a few hundred rows: Ray tasks would only add start-up time
            build(corpus["ingest"], corpus[kind], dataset_dir, seq_len=32, **dataset_options)
    context = StageContext(
        name="pretrain", config=PretrainConfig(**{**TRAINING, **pretrain_options}),
        experiment=experiment or SimpleNamespace(seed=0), fingerprint="objectives0123",
        output_dir=output_dir, inputs={"dataset": dataset_dir, "tokenizer": corpus[kind]})
    started = time.time()
    metrics = run(context)
    print(f"{name}: pretrain {time.time() - started:.1f}s, {metrics}")
    return metrics, dataset_dir


@pytest.mark.parametrize("name", list(RUNS))
def test_each_objective_trains_logs_its_metrics_and_exports(ray_session, corpus, name, tmp_path, monkeypatch):
    _, _, pretrain_options, parts = RUNS[name]
    model_section = pretrain_options["model"]
    experiment = SimpleNamespace(seed=0)
    if name == "mlm-nsp":  # one run is enough to check what reaches wandb
        monkeypatch.setenv("WANDB_SILENT", "true")
        wandb = SimpleNamespace(mode="offline", project="pp-tests", entity=None)
        experiment = SimpleNamespace(seed=0, name="objectives", tracking=SimpleNamespace(wandb=wandb))
    output_dir = tmp_path / "pretrain"
    metrics, dataset_dir = pretrain(corpus, name, output_dir, experiment)

    # Every step logs the loss of each part of the objective, and only those.
    records = StageContext("pretrain", None, None, output_dir).metrics_log.read()
    train = [r for r in records if "loss" in r]
    assert [r["step"] for r in train] == list(range(1, MAX_STEPS + 1))
    part_keys = {f"{p}_{m}" for p in parts for m in ("loss", "accuracy")}
    other_parts = {f"{p}_loss" for p in ("clm", "mlm", "nsp", "sop", "span")} - part_keys
    for record in train:
        assert STEP_KEYS | part_keys <= set(record) and not other_parts & set(record)
        assert all(math.isfinite(record[k]) for k in STEP_KEYS | part_keys)
        assert 0 <= min(record[f"{p}_accuracy"] for p in parts) <= max(record[f"{p}_accuracy"] for p in parts) <= 1
        assert record["loss"] == pytest.approx(sum(record[f"{p}_loss"] for p in parts))
        assert record["tokens_per_s"] > 0 and 0 < record["mfu"] < 1 and 0 <= record["data_wait_share"] < 1
    # A dozen steps on a 100-odd-token vocabulary: the LM loss comes down from the uniform
    # guess, log(vocab) (measured: 4.78 -> ~4.25 for mlm, 5.9 -> ~4.1 for span).
    lm_part = parts[0]
    lm_losses = [round(r[f"{lm_part}_loss"], 3) for r in train]
    print(f"{name}: {lm_part}_loss by step {lm_losses}")
    assert sum(lm_losses[-3:]) / 3 < 0.95 * lm_losses[0]

    evaluations = [r for r in records if "val_loss" in r]
    assert [r["step"] for r in evaluations] == [EVAL_EVERY, MAX_STEPS]
    last = evaluations[-1]
    assert {f"val_{k}" for k in part_keys} <= set(last)
    assert last["val_perplexity"] == pytest.approx(math.exp(last[f"val_{lm_part}_loss"]))
    assert metrics["steps"] == MAX_STEPS and metrics["mfu"] > 0
    assert metrics["val_loss"] == last["val_loss"]
    assert metrics[f"val_{lm_part}_accuracy"] == last[f"val_{lm_part}_accuracy"]

    # model/ reloads and scores the rows the last evaluation read (the first 2 workers x
    # eval_batches x 8 rows; masks drawn from (seed, epoch, example)) to the same metrics.
    model = load_pretrained(output_dir / "model").eval()
    assert type(model) is {"bert": BertForPreTraining, "t5": T5}[model_section["family"]]
    assert model.num_parameters() == metrics["num_parameters"]
    index = json.loads((dataset_dir / "index.json").read_text())
    objective = build_objective(index, model_section["family"])
    num_rows = index["splits"]["validation"]["rows"]
    eval_batches = pretrain_options.get("eval_batches", EVAL_BATCHES)
    validation = ExampleLoader(dataset_dir, "validation", batch_size=min(num_rows, 2 * eval_batches * MICRO_BATCH),
                               shuffle=False)
    batch = next(validation)
    totals = PartTotals(objective.parts, torch.device("cpu"))
    with torch.no_grad():
        totals.add(objective(model, batch))
    rescored = part_metrics(totals.as_dict(), prefix="val_")
    for key, value in rescored.items():
        assert value == pytest.approx(last[key], rel=1e-4, abs=1e-6), key

    # hf/ loads with transformers and gives the same logits.
    auto_class = {"bert": "AutoModelForPreTraining", "t5": "AutoModelForSeq2SeqLM"}[model_section["family"]]
    hf_model = getattr(transformers, auto_class).from_pretrained(output_dir / "hf").eval()
    with torch.no_grad():
        if model_section["family"] == "bert":
            ours = model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])[0]
            theirs = hf_model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                              token_type_ids=batch["token_type_ids"]).prediction_logits
        else:
            ours = model(batch["input_ids"], batch["attention_mask"], decoder_input_ids=batch["decoder_input_ids"])[0]
            theirs = hf_model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                              decoder_input_ids=batch["decoder_input_ids"]).logits
    torch.testing.assert_close(theirs, ours, rtol=1e-4, atol=1e-4)

    if name == "mlm-nsp":
        expected = [b"mlm_accuracy", b"nsp_loss", b"val_nsp_accuracy", b"mfu", b"data_wait_share", b"samples_per_s"]
        content = offline_log(output_dir, expected)
        assert all(e in content for e in expected) and b"objectives0123" in content
