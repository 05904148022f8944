"""The sequence-to-sequence family without Ray, as a worker runs it, on each kind of model
that can generate: the original Transformer and T5 (encoder-decoder) and GPT (decoder
only, loss on the target tokens only). A few optimizer steps on Multi30k pairs, then
decoding (greedy and beam), files and scores as the driver writes them. The CLI run of
the whole stage is in tests/e2e/test_seq2seq_e2e.py (GPT)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from stages.finetune.config import FinetuneConfig
from stages.finetune.families.registry import family_for
from stages.finetune.model_source import load_backbone, resolve_model_source
from stages.finetune.seq2seq.average import WeightSnapshots, snapshot_due
from stages.finetune.seq2seq.spec import Seq2SeqSpec, SplitFiles
from stages.finetune.task_defaults import config_for_task
from stages.finetune.task_family import TaskRequest
from stages.text_metrics import read_lines
from tests.support.seq2seq_models import MULTI30K, write_seq2seq_model

KINDS = ("transformer", "t5", "gpt")


def tiny_spec() -> Seq2SeqSpec:
    def files(stem: str) -> SplitFiles:
        return SplitFiles(source=str(MULTI30K / f"{stem}.en"), target=str(MULTI30K / f"{stem}.de"))

    return Seq2SeqSpec(name="tiny_en_de", kind="translation", prefix="translate English to German: ",
                       max_source_len=32, max_target_len=24,
                       splits={"train": files("val"), "dev": files("val"), "test": files("test_2016_flickr")})


@pytest.fixture(scope="module", params=KINDS)
def prepared(request, tmp_path_factory):
    """(kind, family, request, prepared task, job) for a tiny model of each kind."""
    model_dir = write_seq2seq_model(tmp_path_factory.mktemp(request.param), request.param)
    source = resolve_model_source(None, model_dir)
    spec = tiny_spec()
    cfg = config_for_task(FinetuneConfig(tasks=["multi30k_en_de"], max_train_examples=16, max_eval_examples=6,
                                         label_smoothing=0.1, dropout=0.1, decoding={"num_beams": 2}),
                          "multi30k_en_de")
    task = TaskRequest(spec=spec, cfg=cfg, seed=0, source=source, data_dir=MULTI30K)
    family = family_for(spec, source.family)
    ready = family.prepare(task)
    job = SimpleNamespace(config=cfg, source=source, head_config={"head": spec.head, "task": spec.name,
                                                                   "num_labels": spec.num_labels, "labels": None})
    return request.param, family, task, ready, job


def as_tensors(split, rows, with_labels: bool) -> dict[str, torch.Tensor]:
    batch = {"input_ids": torch.from_numpy(split.input_ids[rows].astype(np.int64)),
             "attention_mask": torch.from_numpy(split.attention_mask[rows].astype(np.int64))}
    if with_labels:
        batch["labels"] = torch.from_numpy(split.labels[rows])
    return batch


def test_a_few_steps_lower_the_loss_then_decoding_writes_scored_files(prepared, tmp_path):
    kind, family, task, ready, job = prepared
    torch.manual_seed(0)
    model = family.worker_model(job, load_backbone(job.source))
    assert model.label_smoothing == 0.1
    assert {m.p for m in model.modules() if isinstance(m, torch.nn.Dropout)} == {0.1}
    train = ready.encoded["train"]
    if kind == "gpt":  # one sequence; the loss sees only the target and its end token
        labelled = train.labels[0] != -100
        assert 2 <= labelled.sum() <= task.spec.max_target_len
        first = int(np.argmax(labelled))
        assert (train.labels[0, first:][labelled[first:]] == train.input_ids[0, first:][labelled[first:]]).all()
        assert not labelled[:first].any() and first > 0
    batch = as_tensors(train, np.arange(8), with_labels=True)
    model.eval()  # no dropout: the two losses differ by the smoothing alone
    with torch.no_grad():
        smoothed = model(**batch)[-1]
        model.label_smoothing = 0.0
        plain = model(**batch)[-1]
        model.label_smoothing = 0.1
    assert not torch.isclose(smoothed, plain)  # finetune.label_smoothing reaches the loss
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    model.train()
    losses = []
    for _ in range(6):
        loss = model(**batch)[-1]
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    assert losses[-1] < losses[0]

    model.eval()
    with torch.no_grad():
        outputs = {split: model(**as_tensors(ready.encoded[split], np.arange(6), with_labels=False))[0].numpy()
                   for split in ("dev", "test")}
    assert outputs["dev"].shape == (6, task.spec.max_source_len + 50)
    metrics = family.write_outputs(task, ready, outputs, tmp_path)
    hypotheses = read_lines(tmp_path / "test" / "hyp.txt")
    assert len(hypotheses) == 6 == len(read_lines(tmp_path / "test" / "ref.txt"))
    assert read_lines(tmp_path / "test" / "ref.txt")[0] == ready.data["rows"]["test"].references[0][0]
    import sacrebleu

    bleu = sacrebleu.corpus_bleu(hypotheses, [read_lines(tmp_path / "test" / "ref.txt")]).score
    assert metrics["test_bleu"] == pytest.approx(bleu)
    assert metrics["test_bleu_signature"].startswith("nrefs:1|")
    assert metrics["bleu_baseline"] > 0  # copying the source shares names and punctuation
    assert metrics["decoding"].startswith("beam 2, length penalty 0.6")


def test_random_init_draws_fresh_seeded_weights_of_the_same_shape(prepared):
    kind, family, _, _, job = prepared
    pretrained = load_backbone(job.source)
    fresh_job = SimpleNamespace(**{**vars(job), "config": job.config.model_copy(update={"init": "random"})})
    models = []
    for _ in range(2):
        torch.manual_seed(7)
        models.append(family.worker_model(fresh_job, load_backbone(job.source)))
    weights = [dict(m.backbone.named_parameters()) for m in models]
    for name, parameter in pretrained.named_parameters():
        assert weights[0][name].shape == parameter.shape
        assert torch.equal(weights[0][name], weights[1][name])
    assert any(not torch.equal(weights[0][name], p) for name, p in pretrained.named_parameters())


def test_averaging_keeps_the_last_n_snapshots_and_takes_their_mean(tmp_path):
    snapshots = WeightSnapshots(tmp_path, keep=2)
    for step, value in ((10, 1.0), (20, 2.0), (30, 6.0)):
        snapshots.save({"w": torch.full((2,), value)}, step)
    assert [p.name for p in snapshots.paths()] == ["step-000000020.safetensors", "step-000000030.safetensors"]
    assert torch.equal(snapshots.average()["w"], torch.full((2,), 4.0))
    assert [snapshot_due(step, 25, 10, False) for step in (9, 10, 20, 25)] == [False, True, True, True]
    assert snapshot_due(3, 25, None, True) and not snapshot_due(10, 25, None, False)


def test_dialogsum_scores_rouge_against_its_three_references_and_writes_each(tmp_path_factory, tmp_path):
    """The built-in summarization task: JSONL, no train split (carved from dev), test with
    three references per dialogue, ROUGE with the first turn as baseline."""
    from stages.finetune.tasks import get_task

    model_dir = write_seq2seq_model(tmp_path_factory.mktemp("t5sum"), "t5")
    source = resolve_model_source(None, model_dir)
    spec = get_task("dialogsum")
    cfg = config_for_task(FinetuneConfig(tasks=["dialogsum"], max_train_examples=8, max_eval_examples=4,
                                         decoding={"num_beams": 1}), "dialogsum")
    task = TaskRequest(spec=spec, cfg=cfg, seed=0, source=source, data_dir=MULTI30K.parents[1])
    family = family_for(spec, "t5")
    ready = family.prepare(task)
    rows = ready.data["rows"]
    assert (len(rows["train"]), len(rows["dev"]), len(rows["test"])) == (8, 4, 4)
    assert not set(rows["train"].sources) & set(rows["dev"].sources)  # dev rows held out from training
    # A "model" that outputs each dialogue's first tokens: scored like any generation.
    outputs = {split: np.where(ready.encoded[split].attention_mask[:, :20] > 0,
                               ready.encoded[split].input_ids[:, :20], -1).astype(np.float32)
               for split in ("dev", "test")}
    metrics = family.write_outputs(task, ready, outputs, tmp_path)
    assert [p.name for p in sorted((tmp_path / "test").glob("ref*.txt"))] == ["ref0.txt", "ref1.txt", "ref2.txt"]
    assert read_lines(tmp_path / "test" / "ref2.txt")[0] == rows["test"].references[0][2]
    assert {"rouge1", "rouge2", "rougeL", "rougeLsum", "test_rougeL", "test_rougeL_baseline"} <= set(metrics)
    assert metrics["references_per_example"] == 3 and metrics["test_rouge1"] > 0
    assert "nrefs-combined:mean" in metrics["test_rouge1_signature"]


def test_zero3_is_refused_where_ranks_would_decode_out_of_step(tmp_path):
    """ZeRO-3 gathers weights in every forward, on every rank together: a GPT's or a beam
    search's decoding loops per rank would hang the run, so they are refused before training."""
    source = resolve_model_source(None, write_seq2seq_model(tmp_path, "gpt"))
    for changes, message in (({"zero_stage": 3, "decoding": {"num_beams": 1}}, "a GPT decodes each rank's rows"),
                             ({"zero_stage": 3}, "beam search decodes each rank's rows")):
        cfg = config_for_task(FinetuneConfig(tasks=["multi30k_en_de"], **changes), "multi30k_en_de")
        with pytest.raises(ValueError, match=message):
            family_for(tiny_spec(), "gpt").prepare(TaskRequest(spec=tiny_spec(), cfg=cfg, seed=0, source=source,
                                                               data_dir=MULTI30K))
