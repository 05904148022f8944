"""BERT (mlm + nsp, mlm only), ALBERT (mlm + sop: factorized embeddings, one shared layer) and T5 (span corruption) pretraining through the
real pretrain stage: Ray Train, 2 workers, DeepSpeed ZeRO-2 (ZeRO-3 for T5) on CPU, a dozen steps each.

The datasets are built by the real dataset stage from a small synthetic corpus with
tokenizers trained here (WordPiece for BERT, Unigram for T5). Each run must log its
per-objective metrics at every step, lower its loss, export model/ that scores the
validation rows exactly as the last evaluation did, and hf/ that transformers loads
with the same logits. The nsp run also tracks to wandb offline. The mlm-only (ZeRO-2) and
span (ZeRO-3) runs also score LAMBADA in the loop (pretrain.eval_tasks) and write snapshots
(pretrain.snapshot_every), which the evaluate stage's score_snapshots scores to the same
numbers, and write samples (pretrain.samples: BERT fills in masks, T5 decodes a prompt
and validation sources), which each snapshot draws again to the same text.
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
from stages.evaluate.fewshot import DEFAULT_SEED
from stages.evaluate.snapshots import score_snapshots
from stages.evaluate.spec import resolve_task_spec
from stages.models import BertForPreTraining, T5, load_pretrained
from stages.objectives.registry import build_batch_builder, build_objective
from stages.pretrain.config import PretrainConfig
from stages.pretrain.metrics import PartTotals, part_metrics
from stages.pretrain.run import run
from stages.pretrain.sample_plan import plan_samples
from stages.pretrain.samples import SAMPLES_FILE, Sampler
from stages.ray_tasks import run_in_process
from tests.unit.test_dataset_objectives import build, make_corpus, make_tokenizer
from tests.support.wandb_offline import offline_log

pytestmark = pytest.mark.ray

MAX_STEPS, EVAL_EVERY, EVAL_BATCHES, MICRO_BATCH = 12, 6, 2, 8
TRAINING = dict(num_workers=2, zero_stage=2, precision="fp32", micro_batch_size=MICRO_BATCH, lr=5e-3,
                warmup_steps=2, max_steps=MAX_STEPS, log_every=1, eval_every=EVAL_EVERY,
                eval_batches=EVAL_BATCHES, checkpoint_every=MAX_STEPS, max_failures=0,
                peak_tflops=1.0)  # a CPU logs MFU only against a peak it is given
BERT = {"family": "bert", "num_layers": 1, "hidden_size": 32, "num_heads": 2}
ALBERT = {"family": "bert", "variant": "albert", "num_layers": 2, "hidden_size": 32, "num_heads": 2,
          "embedding_size": 16}
T5_MODEL = {"family": "t5", "num_layers": 1, "hidden_size": 32, "num_heads": 2, "ff_size": 64}
# In-loop LAMBADA at each evaluation, and a snapshot at each evaluation step.
IN_LOOP = {"eval_tasks": ["lambada_openai"], "eval_tasks_max_examples": 8, "snapshot_every": EVAL_EVERY}
# name -> (tokenizer kind, dataset options, pretrain options, expected parts)
RUNS = {
    "mlm-nsp": ("wordpiece", {"objective": "mlm", "mlm": {"sentence_task": "nsp"}}, {"model": BERT},
                ("mlm", "nsp")),
    # Label smoothing in training; the validation metrics, rescored below without it, must match.
    # ALBERT's recipe (sentence order), exported as AlbertForPreTraining.
    "albert-mlm-sop": ("wordpiece", {"objective": "mlm", "mlm": {"sentence_task": "sop", "masking": "static"}},
                       {"model": ALBERT, "label_smoothing": 0.1}, ("mlm", "sop")),
    "mlm-only": ("wordpiece", {"objective": "mlm", "mlm": {"sentence_task": "none"}},
                 {"model": BERT, **IN_LOOP, "samples": {"prompts": ["The river [MASK] the [MASK] garden."]}},
                 ("mlm",)),
    # ZeRO-3 (parameters sharded; the tied T5 head gathered for export), and the whole
    # validation split, whose last global batch leaves a rank fewer rows or none.
    "span": ("unigram", {"objective": "span"},
             {"model": T5_MODEL, "zero_stage": 3, "eval_batches": 100, **IN_LOOP,
              "samples": {"prompts": ["The quiet <extra_id_0> of the river."], "num_dev_sources": 2}}, ("span",)),
}
STEP_KEYS = {"loss", "lr", "grad_norm", "tokens_per_s", "samples_per_s", "mfu", "data_wait_s", "data_wait_share"}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("objectives-corpus")
    ingest = make_corpus(root, with_sentences=True)
    return {"root": root, "ingest": ingest,
            "wordpiece": make_tokenizer(root, "wordpiece", ingest),
            "unigram": make_tokenizer(root, "unigram", ingest)}


def pretrain(corpus: dict[str, Path], name: str, output_dir: Path, experiment) -> tuple[dict, Path]:
    kind, dataset_options, pretrain_options, _ = RUNS[name]
    dataset_dir = corpus["root"] / f"dataset-{name}"
    if not dataset_dir.is_dir():
        with run_in_process():  # a few hundred rows: Ray tasks would only add start-up time
            build(corpus["ingest"], corpus[kind], dataset_dir, seq_len=32, **dataset_options)
    context = StageContext(
        name="pretrain", config=PretrainConfig(**{**TRAINING, **pretrain_options}),
        experiment=experiment, fingerprint="objectives0123",
        output_dir=output_dir, inputs={"dataset": dataset_dir, "tokenizer": corpus[kind]})
    started = time.time()
    metrics = run(context)
    print(f"{name}: pretrain {time.time() - started:.1f}s, {metrics}")
    return metrics, dataset_dir


@pytest.mark.parametrize("name", list(RUNS))
def test_each_objective_trains_logs_its_metrics_and_exports(ray_session, corpus, name, tmp_path, monkeypatch,
                                                            data_dir):
    _, _, pretrain_options, parts = RUNS[name]
    model_section = pretrain_options["model"]
    experiment = SimpleNamespace(seed=0, resolved_data_dir=data_dir)
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
                               shuffle=False, batch_builder=build_batch_builder)
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

    if "eval_tasks" in pretrain_options:
        check_in_loop_tasks_and_snapshots(output_dir, evaluations, metrics, data_dir)
    if "samples" in pretrain_options:
        check_samples(output_dir, PretrainConfig(**{**TRAINING, **pretrain_options}), corpus[RUNS[name][0]],
                      dataset_dir)

    if name == "mlm-nsp":
        expected = [b"mlm_accuracy", b"nsp_loss", b"val_nsp_accuracy", b"mfu", b"data_wait_share", b"samples_per_s"]
        content = offline_log(output_dir, expected)
        assert all(e in content for e in expected) and b"objectives0123" in content


def check_in_loop_tasks_and_snapshots(output_dir: Path, evaluations: list[dict], metrics: dict, data_dir: Path):
    """LAMBADA logged at every evaluation (its baseline once), snapshots of those steps
    indexed with their tokens, and score_snapshots giving the logged numbers back."""
    keys = ("eval/lambada_openai/acc", "eval/lambada_openai/perplexity")
    for record in evaluations:
        assert 0 <= record[keys[0]] <= 1 and record[keys[1]] > 1 and record["eval_tasks_seconds"] > 0
    assert [("eval/lambada_openai/acc_baseline" in r) for r in evaluations] == [True, False]
    assert all(metrics[key] == evaluations[-1][key] for key in keys)  # the stage's metrics: the last ones

    index = json.loads((output_dir / "snapshots" / "index.json").read_text())
    assert [(e["step"], e["path"]) for e in index] == [
        (EVAL_EVERY, f"snapshots/step-{EVAL_EVERY:07d}"), (MAX_STEPS, f"snapshots/step-{MAX_STEPS:07d}")]
    assert index[1]["tokens"] == 2 * index[0]["tokens"] > 0
    final_snapshot, model_dir = output_dir / index[1]["path"], output_dir / "model"
    assert sorted(p.name for p in final_snapshot.iterdir()) == sorted(p.name for p in model_dir.iterdir())
    assert (final_snapshot / "model.safetensors").read_bytes() == (model_dir / "model.safetensors").read_bytes()

    # The live model scored in the loop (under ZeRO-2: slices per rank; ZeRO-3: every rank
    # everything) = each step's snapshot scored offline, on the same rows.
    rows = score_snapshots(output_dir, [(resolve_task_spec("lambada_openai"), 0)], data_dir, seed=DEFAULT_SEED,
                           max_examples=IN_LOOP["eval_tasks_max_examples"], batch_size=MICRO_BATCH, max_length=None)
    logged = {(r["step"], key): r[key] for r in evaluations for key in keys}
    scored = {(r["step"], f"eval/{r['task']}/{r['metric']}"): r["value"] for r in rows}
    assert scored.keys() == logged.keys()
    for key, value in logged.items():
        assert scored[key] == pytest.approx(value, rel=1e-4), key


def check_samples(output_dir: Path, cfg: PretrainConfig, tokenizer_dir: Path, dataset_dir: Path):
    """pretrain.samples at each snapshot step (every eval_every by default), drawn from the
    live model (BERT: by rank 0 under ZeRO-2; T5: by every rank under ZeRO-3, its
    parameters sharded), as the snapshot of that step, loaded here, draws them."""
    lines = [json.loads(line) for line in (output_dir / SAMPLES_FILE).read_text().splitlines()]
    plan = plan_samples(cfg, tokenizer_dir / "tokenizer.json", dataset_dir,
                        json.loads((dataset_dir / "index.json").read_text()), seed=0)
    num_inputs = len(cfg.samples.prompts) + cfg.samples.num_dev_sources
    assert len(plan.inputs) == num_inputs
    assert [line["step"] for line in lines] == [EVAL_EVERY] * num_inputs + [MAX_STEPS] * num_inputs
    sampler = Sampler(plan, cfg.samples, tokenizer_dir / "tokenizer.json", torch.device("cpu"),
                      output_dir / "unused.jsonl")
    index = json.loads((output_dir / "snapshots" / "index.json").read_text())
    for entry in index:
        logged = [{k: v for k, v in line.items() if k != "time"} for line in lines if line["step"] == entry["step"]]
        model = load_pretrained(output_dir / entry["path"]).eval()
        assert sampler.draw(model, entry["step"], entry["tokens"]) == logged, entry["step"]
    if cfg.model.family == "t5":  # the validation sources, shown with their targets
        validation = [line for line in lines if line["origin"] == "validation"]
        assert len(validation) == 2 * 2 and all("<extra_id_0>" in line["prompt"] and line["reference"]
                                                for line in validation)
    else:  # each [MASK] filled, its 5 likeliest tokens listed
        assert all(len(line["candidates"]) == 2 and len(line["candidates"][0]) == 5 for line in lines)
